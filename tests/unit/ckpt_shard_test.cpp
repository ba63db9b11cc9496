#include <catch2/catch.hpp>

#include <barrier>
#include <cstring>
#include <fstream>
#include <thread>

#include "ckpt_test_util.hpp"
#include "common/error.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

// A 2-D partitioned tensor of `rows` x 3 int32 whose element (r, c) is r*10 + c, cut
// evenly for `rank` of `world`.
Tensor rows_slice(std::uint32_t rank, std::uint32_t world, std::uint64_t rows) {
  const std::uint64_t first = rows * rank / world, last = rows * (rank + 1) / world;
  std::vector<std::int32_t> v;
  for (std::uint64_t r = first; r < last; ++r)
    for (int c = 0; c < 3; ++c) v.push_back(static_cast<std::int32_t>(r * 10 + c));
  std::vector<std::byte> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  Tensor t = Tensor::owning("emb", DType::i32, {last - first, 3}, std::move(bytes), Placement::partitioned);
  t.global_rows = rows;
  return t;
}

State rank_state(std::uint64_t step, std::uint32_t rank, std::uint32_t world, std::uint64_t rows) {
  State st = make_state(step);
  st.rank = rank;
  st.world_size = world;
  st.rng_state = random_bytes(16, 1000 + rank);
  st.tensors.push_back(rows_slice(rank, world, rows));
  return st;
}

// Runs one save per rank, each rank in its own thread with its own Checkpointer, the way
// separate processes would share a directory.
void save_sharded(const std::filesystem::path& dir, std::uint64_t step, std::uint32_t world, std::uint64_t rows,
                  bool with_barrier, Access access = Access::owner) {
  std::barrier sync(static_cast<std::ptrdiff_t>(world));
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (std::uint32_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      Options o;
      o.access = access;
      if (with_barrier)
        o.barrier = [&](bool ok) {
          if (!ok) failures++;
          sync.arrive_and_wait();
          return failures.load() == 0;
        };
      Checkpointer ck(dir, o);
      ck.save(rank_state(step, r, world, rows));
    });
  for (auto& t : ranks) t.join();
}

void check_rows(const Tensor& t, std::uint64_t first, std::uint64_t count) {
  REQUIRE(t.shape == std::vector<std::uint64_t>{count, 3});
  auto v = t.as<std::int32_t>();
  for (std::uint64_t r = 0; r < count; ++r)
    for (int c = 0; c < 3; ++c) REQUIRE(v[r * 3 + c] == static_cast<std::int32_t>((first + r) * 10 + c));
}

}  // namespace

TEST_CASE("sharded save: one file per rank, linked from rank 0's file", "[ckpt][shard]") {
  TempDir dir;
  const bool with_barrier = GENERATE(true, false);  // caller's barrier, or the filesystem wait
  save_sharded(dir.path(), 10, 4, 22, with_barrier);
  CHECK(std::filesystem::exists(dir / "ckpt-000000000010.h5"));
  CHECK(std::filesystem::exists(dir / "ckpt-000000000010.shard-00003.h5"));
  CHECK(list_checkpoints(dir.path()).size() == 1);
  const CheckpointInfo info = describe(dir / "ckpt-000000000010.h5");
  CHECK(info.world_size == 4);
  // Replicated tensors appear once (rank 0), the partitioned one once per rank.
  CHECK(info.tensors.size() == 3 + 4);
  CHECK(verify(dir / "ckpt-000000000010.h5").ok);

  Checkpointer ck(dir.path());
  for (std::uint32_t r = 0; r < 4; ++r) {
    auto got = ck.load_latest(r, 4);
    REQUIRE(got);
    CHECK_FALSE(got->resharded);
    CHECK(got->state.rng_state == random_bytes(16, 1000 + r));
    check_rows(*got->state.find("emb"), 22 * r / 4, 22 * (r + 1) / 4 - 22 * r / 4);
    CHECK(same_bytes(*got->state.find("fc1.weight"), *make_state(10).find("fc1.weight")));
  }
}

TEST_CASE("loading with another world size reshards partitioned and replicated tensors", "[ckpt][shard]") {
  TempDir dir;
  const std::uint32_t saved = GENERATE(1u, 2u, 4u);
  const std::uint32_t now = GENERATE(1u, 3u, 4u);
  save_sharded(dir.path(), 20, saved, 13, true);
  Checkpointer ck(dir.path());
  for (std::uint32_t r = 0; r < now; ++r) {
    auto got = ck.load_latest(r, now);
    REQUIRE(got);
    CHECK(got->resharded == (saved != now));
    CHECK(got->saved_world_size == saved);
    CHECK(got->state.world_size == now);
    check_rows(*got->state.find("emb"), 13 * r / now, 13 * (r + 1) / now - 13 * r / now);
    CHECK(got->state.find("emb")->global_rows == 13);
    CHECK(same_bytes(*got->state.find("fc1.bias"), *make_state(20).find("fc1.bias")));
    // RNG state: the rank's own when the layout is unchanged, rank 0's otherwise.
    CHECK(got->state.rng_state == random_bytes(16, 1000 + (saved == now ? r : 0)));
  }
}

TEST_CASE("a partitioned slice that breaks the even split is refused", "[ckpt][shard]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  State st = rank_state(1, 0, 2, 10);
  st.tensors.back().global_rows = 12;  // rank 0 of 2 would hold 6 rows, it has 5
  CHECK_THROWS_WITH(ck.save(st), Catch::Contains("even split"));
}

TEST_CASE("a rank that fails its shard keeps the checkpoint uncommitted", "[ckpt][shard]") {
  TempDir dir;
  std::barrier sync(2);
  std::atomic<int> failures{0};
  auto barrier = [&](bool ok) {
    if (!ok) failures++;
    sync.arrive_and_wait();
    return failures.load() == 0;
  };
  std::thread rank1([&] {
    Options o;
    o.barrier = barrier;
    Checkpointer ck(dir.path(), o);
    State st = rank_state(3, 1, 2, 10);
    st.tensors.back().name = "bad/name";  // refused by validation, before anything is written
    try {
      ck.save(st);
    } catch (const saker::Error&) {
      barrier(false);  // a rank whose save is refused up front tells the others itself
    }
  });
  Options o;
  o.barrier = barrier;
  Checkpointer ck(dir.path(), o);
  CHECK_THROWS_WITH(ck.save(rank_state(3, 0, 2, 10)), Catch::Contains("not committed"));
  rank1.join();
  CHECK(list_checkpoints(dir.path()).empty());
}

TEST_CASE("without a barrier, rank 0 times out naming the missing rank", "[ckpt][shard]") {
  TempDir dir;
  Options o;
  o.shard_timeout = std::chrono::seconds(1);
  Checkpointer ck(dir.path(), o);
  CHECK_THROWS_WITH(ck.save(rank_state(4, 0, 3, 9)), Catch::Contains("rank(s) 1,2"));
  CHECK(list_checkpoints(dir.path()).empty());
}

TEST_CASE("a damaged part that a rank only checks (another rank's slice) still rejects the checkpoint",
          "[ckpt][shard]") {
  TempDir dir;
  save_sharded(dir.path(), 30, 2, 22, true);
  const std::filesystem::path shard1 = dir / "ckpt-000000000030.shard-00001.h5";
  std::string whole;
  {
    std::ifstream in(shard1, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  const Tensor part = rows_slice(1, 2, 22);
  const std::size_t at = whole.find(std::string(reinterpret_cast<const char*>(part.bytes.data()), part.bytes.size()));
  REQUIRE(at != std::string::npos);
  {
    std::fstream io(shard1, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(at + 5));
    io.put(static_cast<char>(whole[at + 5] ^ 0x01));
  }
  Checkpointer ck(dir.path());
  // Rank 0 of 2 and rank 0 of 4 (resharded) need none of shard 1's rows of "emb".
  for (const std::uint32_t world : {2u, 4u}) {
    INFO("world size " << world);
    CHECK_FALSE(ck.load_latest(0, world));
  }
  CHECK_FALSE(ck.load_latest(1, 2));
}

TEST_CASE("sharded save: shard files are 0600, 0640 by explicit choice", "[ckpt][shard][modes]") {
  for (Access access : {Access::owner, Access::group}) {
    TempDir dir;
    const mode_t old = ::umask(0);
    save_sharded(dir.path(), 10, 3, 9, true, access);
    ::umask(old);
    for (const char* name : {"ckpt-000000000010.h5", "ckpt-000000000010.shard-00001.h5", "ckpt-000000000010.shard-00002.h5"}) {
      INFO(name);
      struct stat st {};
      REQUIRE(::stat((dir / name).c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == file_mode(access));
    }
  }
}
