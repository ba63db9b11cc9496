#include <catch2/catch.hpp>

#include <fstream>

#include "ckpt/commit.hpp"
#include "ckpt_test_util.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {
// Steps 1..n saved with nothing pruned.
void save_steps(const std::filesystem::path& dir, std::uint64_t n, std::size_t floats) {
  Options o;
  o.keep_last = 0;
  Checkpointer ck(dir, o);
  for (std::uint64_t s = 1; s <= n; ++s) ck.save(make_state(s, floats));
}
std::vector<std::uint64_t> steps_in(const std::filesystem::path& dir) {
  std::vector<std::uint64_t> out;
  for (const auto& f : list_checkpoints(dir)) out.push_back(describe(f).step);
  return out;
}
}  // namespace

TEST_CASE("retention keeps the last K plus every Mth step", "[ckpt][retention]") {
  TempDir dir;
  Options o;
  o.keep_last = 2;
  o.keep_every = 4;
  Checkpointer ck(dir.path(), o);
  for (std::uint64_t s = 1; s <= 10; ++s) ck.save(make_state(s, 16));
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{4, 8, 9, 10});
  CHECK(commit::read_latest(dir.path()) == std::optional<std::string>("ckpt-000000000010.h5"));
}

TEST_CASE("keep_last 0 keeps everything; prune never removes the newest", "[ckpt][retention]") {
  TempDir dir;
  save_steps(dir.path(), 4, 16);
  CHECK(steps_in(dir.path()).size() == 4);
  CHECK(prune(dir.path(), 1, 0).size() == 3);
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{4});
  CHECK(prune(dir.path(), 1, 0).empty());
}

TEST_CASE("shard files go with their checkpoint; orphans of failed saves are removed", "[ckpt][retention]") {
  TempDir dir;
  Options o;
  o.keep_last = 1;
  Checkpointer ck(dir.path(), o);
  ck.save(make_state(1, 16));
  // An orphan shard of a save that never committed, older than the newest checkpoint.
  std::ofstream(dir / "ckpt-000000000000.shard-00001.h5") << "partial";
  // A shard of a save in progress (newer than the newest checkpoint) must survive.
  std::ofstream(dir / "ckpt-000000000009.shard-00001.h5") << "in progress";
  ck.save(make_state(2, 16));
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt-000000000000.shard-00001.h5"));
  CHECK(std::filesystem::exists(dir / "ckpt-000000000009.shard-00001.h5"));
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{2});
}

TEST_CASE("stale temporary files of dead writers are cleaned up, live ones kept", "[ckpt][retention]") {
  TempDir dir;
  const std::string host = commit::hostname();
  const auto dead = dir / (".ckpt-000000000001.h5.tmp." + host + ".999999999.0000beef");
  const auto live = dir / (".ckpt-000000000002.h5.tmp." + host + "." + std::to_string(::getpid()) + ".0000beef");
  const auto other_old = dir / ".ckpt-000000000003.h5.tmp.otherhost.12.0000beef";
  const auto other_new = dir / ".ckpt-000000000004.h5.tmp.otherhost.13.0000beef";
  for (const auto& p : {dead, live, other_old, other_new}) std::ofstream(p) << "x";
  std::filesystem::last_write_time(other_old, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  Checkpointer ck(dir.path());
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  CHECK_FALSE(std::filesystem::exists(other_old));
  CHECK(std::filesystem::exists(other_new));
}

namespace {
// Flips one byte in the middle of a file (inside its HDF5 metadata or data).
void damage(const std::filesystem::path& f, std::uint64_t at = 5000) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  io.read(&c, 1);
  io.seekp(static_cast<std::streamoff>(at));
  c = static_cast<char>(c ^ 0x20);
  io.write(&c, 1);
}
}  // namespace

TEST_CASE("prune counts only verified checkpoints and never removes the newest verified", "[ckpt][retention]") {
  // Issue 12: three good checkpoints and two damaged newer ones; --keep 1 used to delete
  // every good one.
  TempDir dir;
  save_steps(dir.path(), 5, 1024);
  damage(dir / "ckpt-000000000004.h5");
  damage(dir / "ckpt-000000000005.h5");
  for (const bool full : {true, false}) {
    PruneOptions o;
    o.keep_last = 1;
    o.full_verify = full;
    o.dry_run = true;
    const PruneReport plan = prune(dir.path(), o);
    CHECK(plan.damaged.size() == 2);
    CHECK(plan.removed == std::vector<std::filesystem::path>{dir / "ckpt-000000000001.h5", dir / "ckpt-000000000002.h5"});
    CHECK(list_checkpoints(dir.path()).size() == 5);  // a dry run removes nothing
  }
  PruneOptions o;
  o.keep_last = 1;
  o.full_verify = true;
  prune(dir.path(), o);
  CHECK(list_checkpoints(dir.path()) ==
        std::vector<std::filesystem::path>{dir / "ckpt-000000000003.h5", dir / "ckpt-000000000004.h5",
                                           dir / "ckpt-000000000005.h5"});
  Checkpointer ck(dir.path());
  auto got = ck.load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 3);
}

TEST_CASE("prune removes nothing while no checkpoint verifies", "[ckpt][retention]") {
  TempDir dir;
  save_steps(dir.path(), 3, 1024);
  for (std::uint64_t s = 1; s <= 3; ++s) damage(dir / ("ckpt-00000000000" + std::to_string(s) + ".h5"));
  CHECK(prune(dir.path(), 1, 0).empty());
  CHECK(list_checkpoints(dir.path()).size() == 3);
}
