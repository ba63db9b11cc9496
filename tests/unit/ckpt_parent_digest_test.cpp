// A loaded checkpoint is named as the parent of later saves by the SHA-256 of its main file
// (ckpt/provenance.hpp), taken in the load's own read pass (ckpt/ordered_sha256.hpp): the
// digest is exactly sha256 of the file's bytes, the save reads nothing of the parent, and a
// file swapped in under the loaded one's name after the load is not taken for the parent.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

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

TEST_CASE("parent digest: a save after a load reads nothing of the loaded checkpoint", "[ckpt][provenance]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  const fs::path parent = Checkpointer(d / "run1").save(big_state(1)).file;
  const std::uint64_t parent_size = fs::file_size(parent);
  for (const bool async : {false, true}) {
    INFO((async ? "save_async" : "save"));
    Checkpointer ck(d / (async ? "async" : "sync"));
    ck.save(make_state(1));  // what a save reads once per process (the program's own digest) is read now
    ck.load(parent);
    const std::uint64_t before = bytes_read_so_far();
    const fs::path child = async ? ck.save_async(make_state(2)).wait().file : ck.save(make_state(2)).file;
    const std::uint64_t read = bytes_read_so_far() - before;
    // Hashing the parent again would read all of it (20 MiB); the save itself reads a few KiB.
    CHECK(read < parent_size / 8);
    CHECK(parent_digest(child) == prov::file_sha256(parent));
  }
  // And the load read the file about once: the digest costs no second pass.
  Checkpointer ck(d / "run1");
  const std::uint64_t before = bytes_read_so_far();
  REQUIRE(ck.load_latest());
  CHECK(bytes_read_so_far() - before < parent_size + parent_size / 8);
}

TEST_CASE("parent digest attack: a file swapped in under the loaded one's name is not its parent",
          "[ckpt][provenance][attack]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir d;
  const fs::path loaded = Checkpointer(d / "run1").save(make_state(7)).file;
  const fs::path other = Checkpointer(d / "run2").save(make_state(7, 2048)).file;
  const std::string loaded_digest = prov::file_sha256(loaded);
  Checkpointer ck(d / "run1");
  REQUIRE(ck.load_latest());
  fs::rename(other, loaded);  // between the load and the save
  REQUIRE(prov::file_sha256(loaded) != loaded_digest);
  CHECK(parent_digest(ck.save(make_state(8)).file) == loaded_digest);
}
