// The attacker who knows the format (issue 12): rewrites a manifest and recomputes its
// XXH3 checksum (which is not a MAC). An encrypted run must still refuse: the manifest's
// GCM tag, the key id, and "an encrypted run refuses plaintext" stand in the way. The
// byte-level and HDF5-level corpus is tests/ckpt/make-corpus.py (corpus.sh).
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <thread>

#include "ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "common/hash.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

std::filesystem::path key_in(const TempDir& dir, std::uint64_t seed) {
  auto bytes = random_bytes(32, seed);
  write_file(dir / "key", std::string(reinterpret_cast<const char*>(bytes.data()), 32), 0600);
  return dir / "key";
}

std::uint64_t u64_at(const std::string& s, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Rewrites the manifest of `file` through `edit`, with a correct length and checksum.
void rewrite_manifest(const std::filesystem::path& file, const std::function<std::string(std::string)>& edit) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::uint64_t len = u64_at(bytes, 24);
  const std::string text = edit(bytes.substr(manifest::kHeaderBytes, len));
  REQUIRE(manifest::kHeaderBytes + text.size() <= u64_at(bytes, 16));
  std::string head = bytes.substr(0, manifest::kHeaderBytes);
  for (int i = 0; i < 8; ++i) head[24 + i] = static_cast<char>(text.size() >> (8 * i));
  // Format 3's header checksum covers header bytes 48..79 and then the manifest.
  const std::string covered = (head[12] == '3' ? head.substr(48, 32) : std::string()) + text;
  const auto digest = saker::hash::xxh3_128(covered.data(), covered.size()).hex();
  for (int i = 0; i < 16; ++i) head[32 + i] = static_cast<char>(std::stoi(digest.substr(2 * i, 2), nullptr, 16));
  std::string out = head + text + std::string(len > text.size() ? len - text.size() : 0, '\0');
  out += bytes.substr(out.size());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << out;
}

// An encrypted run with checkpoints at steps 1 and 2; the caller then attacks step 2.
struct EncryptedRun {
  TempDir dir;
  Options options;
  std::unique_ptr<Checkpointer> ck;
  explicit EncryptedRun(std::uint64_t key_seed) {
    options.key_file = key_in(dir, key_seed);
    ck = std::make_unique<Checkpointer>(dir / "c", options);
    ck->save(make_state(1, 64));
    ck->save(make_state(2, 64));
  }
  std::filesystem::path newest() const { return dir / "c" / "ckpt-000000000002.h5"; }
};

}  // namespace

TEST_CASE("a downgraded manifest (encryption removed, checksum recomputed) is refused", "[ckpt][attack]") {
  EncryptedRun run(1);
  rewrite_manifest(run.newest(), [](std::string m) {
    m = std::regex_replace(m, std::regex("encryption aes-256-gcm"), "encryption none");
    return std::regex_replace(m, std::regex(" 1 [0-9a-f]{24} [0-9a-f]{32}\n"), " 0 - -\n");
  });
  const Verdict v = verify(run.newest(), {}, run.options.key_file);
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.problem, Catch::Contains("plaintext"));
  auto got = run.ck->load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 1);  // fell back to the intact, encrypted one
}

TEST_CASE("tensors swapped in an encrypted manifest (checksum recomputed) fail authentication", "[ckpt][attack]") {
  EncryptedRun run(2);
  rewrite_manifest(run.newest(), [](std::string m) {
    // Swap the names of the first two tensor lines.
    std::smatch a;
    REQUIRE(std::regex_search(m, a, std::regex("\ntensor ([^ ]+) ")));
    const std::string first = a[1];
    const std::string rest = a.suffix();
    std::smatch b;
    REQUIRE(std::regex_search(rest, b, std::regex("\ntensor ([^ ]+) ")));
    const std::string second = b[1];
    m = std::regex_replace(m, std::regex("\ntensor " + first + " "), "\ntensor @@ ");
    m = std::regex_replace(m, std::regex("\ntensor " + second + " "), "\ntensor " + first + " ");
    return std::regex_replace(m, std::regex("\ntensor @@ "), "\ntensor " + second + " ");
  });
  const Verdict v = verify(run.newest(), {}, run.options.key_file);
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.problem, Catch::Contains("authentication tag"));
  auto got = run.ck->load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 1);
}

TEST_CASE("a shard of another run, listed by a forged main manifest, is refused by run id", "[ckpt][attack]") {
  // Shard binding does not rest on the main file's list alone: each shard's own
  // manifest carries the run id.
  TempDir dir;
  auto save2 = [&](const std::filesystem::path& d, const std::string& run) {
    Options o;
    o.run_id = run;
    std::vector<std::unique_ptr<Checkpointer>> cks;
    cks.push_back(std::make_unique<Checkpointer>(d, o));
    cks.push_back(std::make_unique<Checkpointer>(d, o));
    std::thread other([&] {
      State s = make_state(5, 64);
      s.world_size = 2;
      s.rank = 1;
      cks[1]->save(s);
    });
    State s = make_state(5, 64);
    s.world_size = 2;
    cks[0]->save(s);
    other.join();
  };
  save2(dir / "a", "run-a");
  save2(dir / "b", "run-b");
  std::filesystem::copy_file(dir / "b" / "ckpt-000000000005.shard-00001.h5", dir / "a" / "ckpt-000000000005.shard-00001.h5",
                             std::filesystem::copy_options::overwrite_existing);
  const auto foreign = manifest::open_checked(dir / "a" / "ckpt-000000000005.shard-00001.h5");
  rewrite_manifest(dir / "a" / "ckpt-000000000005.h5", [&](std::string m) {
    const std::size_t line = m.find("\nshard 1 ");
    REQUIRE(line != std::string::npos);
    const std::size_t end = m.find('\n', line + 1);
    return m.replace(end - 32, 32, foreign.manifest_xxh3);
  });
  const Verdict v = verify(dir / "a" / "ckpt-000000000005.h5");
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.problem, Catch::Contains("another run"));
  CHECK_THAT(v.problem, Catch::Contains("shard-00001"));
}
