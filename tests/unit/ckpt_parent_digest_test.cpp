// A loaded checkpoint is named as the parent of later saves by the SHA-256 of its main file
// (ckpt/provenance.hpp), hashed on a thread after the load returns, through the descriptor
// the load read (ckpt/parent_digest.hpp): the digest is exactly sha256 of the file's bytes,
// the load returns without waiting for it, the file is read once by the load and once by the
// digest, a file swapped in under the loaded one's name is not taken for the parent, and a
// file changed in place after the load is named as no one's parent.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <string>

#include "ckpt/parent_digest.hpp"
#include "ckpt/provenance.hpp"
#include "ckpt_test_util.hpp"

namespace fs = std::filesystem;
namespace prov = saker::ckpt::provenance;
using namespace saker::ckpt;
using saker::ckpt::testing::make_state;
using saker::ckpt::testing::random_bytes;
using saker::ckpt::testing::TempDir;
using saker::ckpt::testing::write_file;

namespace {

// Bytes this process has read so far, all threads and files (the kernel's count: read,
// pread and their kin, page cache hits included).
std::uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  FAIL("no rchar line in /proc/self/io");
  return 0;
}

// A state whose big tensor spans several 8 MiB read pieces (the hash helper's path).
State big_state(std::uint64_t step) {
  State st = make_state(step);
  st.tensors.push_back(Tensor::owning("big", DType::u8, {20u << 20}, random_bytes(20u << 20, step + 5)));
  return st;
}

prov::Record record_of(const fs::path& file) { return prov::decode(describe(file).provenance, file.string()); }

std::string parent_digest(const fs::path& child) {
  const auto r = record_of(child);
  REQUIRE(r.parents.size() == 1);
  return r.parents[0].sha256;
}

// Holds digest threads before they read, for the length of a scope.
struct HeldDigests {
  HeldDigests() { internal::hold_parent_digests_for_test(true); }
  ~HeldDigests() { release(); }
  void release() { internal::hold_parent_digests_for_test(false); }
};

fs::path make_key(const TempDir& dir) {
  const fs::path p = dir / "key";
  const auto bytes = random_bytes(32, 9);
  write_file(p, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), 0600);
  return p;
}

}  // namespace

TEST_CASE("parent digest: the SHA-256 of the loaded file, small or multi-piece, cache kept or dropped, encrypted",
          "[ckpt][provenance]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  Options encrypted;
  encrypted.key_file = make_key(d);
  struct Case {
    const char* what;
    State state;
    ReadCache cache;
    bool encrypt;
  };
  const Case cases[] = {{"small, kept", make_state(3), ReadCache::keep, false},
                        {"20 MiB tensor, dropped", big_state(4), ReadCache::drop, false},
                        {"20 MiB tensor, kept, encrypted", big_state(5), ReadCache::keep, true}};
  for (const Case& c : cases) {
    INFO(c.what);
    const fs::path run = d / ("run-" + std::to_string(c.state.step));
    Options o = c.encrypt ? encrypted : Options{};
    const fs::path parent = Checkpointer(run, o).save(c.state).file;
    o.read_cache = c.cache;
    Checkpointer ck(run, o);
    REQUIRE(ck.load_latest());
    CHECK(parent_digest(ck.save(make_state(c.state.step + 1)).file) == prov::file_sha256(parent));
  }
}

TEST_CASE("parent digest: the load returns without its digest; load and digest read the file once each",
          "[ckpt][provenance]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  const fs::path parent = Checkpointer(d / "run1").save(big_state(1)).file;
  const std::uint64_t parent_size = fs::file_size(parent);
  for (const bool async : {false, true}) {
    INFO((async ? "save_async" : "save"));
    Checkpointer ck(d / (async ? "async" : "sync"));
    ck.save(make_state(1));  // what a save reads once per process (the program's own digest) is read now
    HeldDigests held;
    const std::uint64_t before = bytes_read_so_far();
    // Were the load waiting for the digest, it would not return while digests are held.
    auto load = std::async(std::launch::async, [&] { ck.load(parent); });
    const bool returned = load.wait_for(std::chrono::seconds(120)) == std::future_status::ready;
    held.release();
    REQUIRE(returned);
    load.get();
    const std::uint64_t by_load = bytes_read_so_far() - before;
    CHECK(by_load < parent_size + parent_size / 8);  // the load alone: the file about once
    const fs::path child = async ? ck.save_async(make_state(2)).wait().file : ck.save(make_state(2)).file;
    // The save waited for the digest, which read the file once more, through the same descriptor.
    const std::uint64_t in_all = bytes_read_so_far() - before;
    CHECK(in_all - by_load >= parent_size);
    CHECK(in_all < 2 * parent_size + parent_size / 8);
    CHECK(parent_digest(child) == prov::file_sha256(parent));
  }
}

TEST_CASE("parent digest attack: a file changed in place after the load is no one's parent", "[ckpt][provenance][attack]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  const fs::path loaded = Checkpointer(d / "run1").save(make_state(7)).file;
  Checkpointer ck(d / "run1");
  HeldDigests held;  // the change lands before the digest reads a byte: it would hash the new bytes
  REQUIRE(ck.load_latest());
  const int fd = ::open(loaded.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "x", 1) == 1);
  ::close(fd);
  held.release();
  const fs::path child = ck.save(make_state(8)).file;
  CHECK(record_of(child).parents.empty());
}

TEST_CASE("parent digest: a descriptor and never a name; a digest never started or stopped gives none",
          "[ckpt][provenance]") {
  TempDir d;
  const fs::path file = d / "f";
  write_file(file, std::string(3u << 20, 'a'), 0644);
  const std::string want = prov::file_sha256(file);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ParentDigest digest(fd, file.string(), false);
  ::close(fd);                                         // the digest holds its own duplicate
  write_file(d / "other", std::string(5, 'b'), 0644);  // and the name now leads elsewhere
  fs::rename(d / "other", file);
  std::string why;
  digest.start();
  CHECK(digest.result(&why) == want);
  CHECK(digest.bytes_read() == (3u << 20));
  const int fd2 = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  ParentDigest unstarted(fd2, file.string(), false);
  ::close(fd2);
  CHECK_FALSE(unstarted.result(&why).has_value());
  CHECK(why.find("never started") != std::string::npos);
  ParentDigest bad(-1, file.string(), false);
  bad.start();
  CHECK_FALSE(bad.result(&why).has_value());
  CHECK(why.find("cannot be kept open") != std::string::npos);
}

TEST_CASE("parent digest attack: a file swapped in under the loaded one's name is not its parent",
          "[ckpt][provenance][attack]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  const fs::path loaded = Checkpointer(d / "run1").save(make_state(7)).file;
  const fs::path other = Checkpointer(d / "run2").save(make_state(7, 2048)).file;
  const std::string loaded_digest = prov::file_sha256(loaded);
  Checkpointer ck(d / "run1");
  HeldDigests held;  // the swap lands before the digest reads a byte
  REQUIRE(ck.load_latest());
  fs::rename(other, loaded);  // between the load and the save
  held.release();
  REQUIRE(prov::file_sha256(loaded) != loaded_digest);
  CHECK(parent_digest(ck.save(make_state(8)).file) == loaded_digest);
}
