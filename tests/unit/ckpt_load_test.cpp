// Loading fast without giving up checks: the checksum helper thread, page-cache drop-behind
// and the choice between keeping and dropping the cache.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <fstream>

#include "ckpt/hash_behind.hpp"
#include "ckpt/load.hpp"
#include "ckpt_test_util.hpp"
#include "common/hash.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;
namespace fs = std::filesystem;

namespace {

// A state whose one big tensor spans several read pieces (8 MiB each).
State big_state(std::uint64_t step) {
  State st = make_state(step);
  st.tensors.push_back(Tensor::owning("big", DType::u8, {20u << 20}, random_bytes(20u << 20, step + 5)));
  return st;
}

// Fraction of the file's pages in the page cache.
double resident_fraction(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::size_t size = fs::file_size(file);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  REQUIRE(::mincore(map, size, in.data()) == 0);
  ::munmap(map, size);
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return static_cast<double>(n) / static_cast<double>(in.size());
}

void cache_whole_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
  }
}

void evict_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

TEST_CASE("the checksum helper hashes pieces in order, like one pass over the bytes", "[ckpt][load]") {
  const auto bytes = random_bytes((20u << 20) + 12345, 99);
  HashBehind h;
  for (const std::size_t piece : {std::size_t{1}, std::size_t{4096} + 7, std::size_t{8} << 20}) {
    INFO("piece " << piece);
    h.reset();
    for (std::size_t at = 0; at < bytes.size(); at += piece) h.add(bytes.data() + at, std::min(piece, bytes.size() - at));
    CHECK(h.digest() == saker::hash::xxh3_128(bytes.data(), bytes.size()));
  }
  h.reset();
  CHECK(h.digest() == saker::hash::xxh3_128(bytes.data(), 0));
  h.add(bytes.data(), 1000);  // destroyed with work queued: waits for it
}

TEST_CASE("tensors spanning several pieces load bit for bit; a flip in any piece is caught", "[ckpt][load]") {
  TempDir dir;
  const State st = big_state(3);
  {
    Checkpointer ck(dir.path());
    ck.save(st);
  }
  const fs::path file = dir / "ckpt-000000000003.h5";
  for (const ReadCache mode : {ReadCache::keep, ReadCache::drop}) {
    Options o;
    o.read_cache = mode;
    Checkpointer ck(dir.path(), o);
    auto got = ck.load_latest();
    REQUIRE(got);
    CHECK(same_bytes(*got->state.find("big"), *st.find("big")));
    CHECK(same_bytes(*got->state.find("fc1.weight"), *st.find("fc1.weight")));
  }
  // Where "big" lies in the file: search for its first 64 bytes.
  std::string whole;
  {
    std::ifstream in(file, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto& big = *st.find("big");
  const std::size_t at = whole.find(std::string(reinterpret_cast<const char*>(big.bytes.data()), 64));
  REQUIRE(at != std::string::npos);
  const fs::path pristine = dir / "pristine";
  fs::copy_file(file, pristine);
  // First, middle of the second, and last byte of the third piece.
  for (const std::size_t off : {std::size_t{0}, (std::size_t{12} << 20) + 3, (std::size_t{20} << 20) - 1}) {
    INFO("flip at byte " << off << " of the tensor");
    fs::copy_file(pristine, file, fs::copy_options::overwrite_existing);
    {
      std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(static_cast<std::streamoff>(at + off));
      io.put(static_cast<char>(whole[at + off] ^ 0x10));
    }
    const Verdict v = verify(file);  // check-only path (two alternating buffers)
    REQUIRE_FALSE(v.ok);
    CHECK_THAT(v.problem, Catch::Contains("checksum mismatch") && Catch::Contains("big"));
    Checkpointer ck(dir.path());
    auto got = ck.load_latest();  // the only checkpoint is damaged: nothing to load
    CHECK_FALSE(got);
  }
}

TEST_CASE("drop-behind leaves a loaded checkpoint out of the page cache; keep leaves it in", "[ckpt][load]") {
  TempDir dir;
  struct statfs fsinfo{};
  REQUIRE(::statfs(dir.path().c_str(), &fsinfo) == 0);
  if (fsinfo.f_type == TMPFS_MAGIC) {
    WARN("skipped: " << dir.path() << " is tmpfs, whose pages cannot be dropped");
    return;
  }
  {
    Checkpointer ck(dir.path());
    ck.save(big_state(4));
  }
  const fs::path file = dir / "ckpt-000000000004.h5";

  // A load returns before its parent digest is taken: a thread then reads the file again,
  // under the same rule (ckpt/parent_digest.hpp). parent_digests() waits for it, so each
  // figure is the whole load's, not a moment inside that second read (0.15 resident once,
  // under ASan on a loaded machine, with the measure taken as load_latest() returned).
  Options keep;
  keep.read_cache = ReadCache::keep;
  evict_file(file);
  REQUIRE(resident_fraction(file) < 0.05);
  {
    Checkpointer ck(dir.path(), keep);
    REQUIRE(ck.load_latest());
    REQUIRE(ck.parent_digests().size() == 1);
  }
  CHECK(resident_fraction(file) > 0.9);

  Options drop;
  drop.read_cache = ReadCache::drop;
  cache_whole_file(file);
  REQUIRE(resident_fraction(file) > 0.9);
  {
    Checkpointer ck(dir.path(), drop);
    REQUIRE(ck.load_latest());
    REQUIRE(ck.parent_digests().size() == 1);
  }
  CHECK(resident_fraction(file) < 0.1);  // what is left: HDF5 metadata and piece-boundary pages
}

TEST_CASE("read_cache automatic drops only for a node's only reader", "[ckpt][load]") {
  const char* saved = std::getenv("LOCAL_WORLD_SIZE");
  const std::string old = saved ? saved : "";
  ::unsetenv("LOCAL_WORLD_SIZE");
  CHECK(drop_read_cache(ReadCache::automatic, 1));
  CHECK_FALSE(drop_read_cache(ReadCache::automatic, 4));  // unknown: ranks may share this node
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  CHECK(drop_read_cache(ReadCache::automatic, 4));
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  CHECK_FALSE(drop_read_cache(ReadCache::automatic, 4));
  CHECK(drop_read_cache(ReadCache::automatic, 1));
  CHECK(drop_read_cache(ReadCache::drop, 4));
  CHECK_FALSE(drop_read_cache(ReadCache::keep, 1));
  if (saved) ::setenv("LOCAL_WORLD_SIZE", old.c_str(), 1); else ::unsetenv("LOCAL_WORLD_SIZE");
}
