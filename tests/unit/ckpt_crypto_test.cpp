#include <catch2/catch.hpp>

#include <algorithm>

#include "ckpt/crypto.hpp"
#include "ckpt_test_util.hpp"
#include "common/error.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

std::filesystem::path make_key(const TempDir& dir, const std::string& name, std::uint64_t seed, mode_t mode = 0600) {
  auto bytes = random_bytes(32, seed);
  write_file(dir / name, std::string(reinterpret_cast<const char*>(bytes.data()), 32), mode);
  return dir / name;
}

// A stand-in for the policy engine: refuses one directory, requires encryption for one dataset.
class FakeGuard : public DestinationGuard {
 public:
  std::filesystem::path forbidden;
  std::string classified;
  mutable int checks = 0;
  void check(const std::filesystem::path& dir, const std::vector<DatasetVersion>& lineage) const override {
    ++checks;
    if (dir == forbidden)
      throw saker::Error("dataset " + lineage.front().str() + " is resident in zone-a; " + dir.string() + " is outside");
  }
  bool require_encryption(const std::vector<DatasetVersion>& lineage) const override {
    for (const auto& d : lineage)
      if (d.name == classified) return true;
    return false;
  }
};

Options opts(const std::filesystem::path& key, std::shared_ptr<const DestinationGuard> guard = nullptr) {
  Options o;
  o.key_file = key;
  o.guard = std::move(guard);
  return o;
}

}  // namespace

TEST_CASE("encrypted checkpoints: right key loads, wrong and missing keys fail clearly", "[ckpt][crypto]") {
  TempDir keys;
  TempDir dir;
  const auto key = make_key(keys, "key", 1);
  const auto other = make_key(keys, "other", 2);
  const State st = make_state(8);
  {
    Checkpointer ck(dir.path(), opts(key));
    ck.save(st);
  }
  const CheckpointInfo info = describe(dir / "ckpt-000000000008.h5");
  CHECK(info.encryption == "aes-256-gcm");
  CHECK(info.key_id.size() == 16);
  CHECK(info.tensors[0].encrypted);
  // Without the key the stored bytes are ciphertext, yet checksums still verify.
  CHECK(verify(dir / "ckpt-000000000008.h5").ok);

  SECTION("right key") {
    Checkpointer ck(dir.path(), opts(key));
    auto got = ck.load_latest();
    REQUIRE(got);
    for (const Tensor& t : st.tensors) CHECK(same_bytes(*got->state.find(t.name), t));
  }
  SECTION("wrong key") {
    Checkpointer ck(dir.path(), opts(other));
    CHECK_THROWS_WITH(ck.load_latest(), Catch::Contains("encrypted with another key"));
  }
  SECTION("missing key") {
    Checkpointer ck(dir.path());
    CHECK_THROWS_WITH(ck.load_latest(), Catch::Contains("no key file was given"));
  }
}

TEST_CASE("a key file others can read is refused; malformed keys too", "[ckpt][crypto]") {
  TempDir keys;
  TempDir dir;
  CHECK_THROWS_WITH(Checkpointer(dir.path(), opts(make_key(keys, "k", 1, 0644))),
                    Catch::Contains("chmod 600"));
  write_file(keys / "short", "tooshort", 0600);
  CHECK_THROWS_WITH(Checkpointer(dir.path(), opts(keys / "short")), Catch::Contains("malformed"));
  CHECK_THROWS_WITH(Checkpointer(dir.path(), opts(keys / "absent")), Catch::Contains("does not exist"));
  write_file(keys / "hex", std::string(64, 'a') + "\n", 0600);
  CHECK_NOTHROW(Checkpointer(dir.path(), opts(keys / "hex")));
}

TEST_CASE("AES-GCM: tampering, another tensor's AAD or another key fail authentication", "[ckpt][crypto]") {
  TempDir keys;
  const crypto::Key key = crypto::load_key(make_key(keys, "k", 5));
  const crypto::Key other = crypto::load_key(make_key(keys, "o", 6));
  CHECK(key.id != other.id);
  const auto plain = random_bytes(1000, 7);
  crypto::Sealed s = crypto::seal(key, plain, "saker-ckpt/1/8/0/w");
  CHECK(s.ciphertext != plain);
  std::vector<std::byte> out(plain.size());
  crypto::open(key, s.ciphertext, s.nonce.data(), s.tag.data(), "saker-ckpt/1/8/0/w", out, "w");
  CHECK(out == plain);
  CHECK_THROWS_WITH(crypto::open(key, s.ciphertext, s.nonce.data(), s.tag.data(), "saker-ckpt/1/8/0/b", out, "w"),
                    Catch::Contains("authentication tag"));
  CHECK_THROWS_AS(crypto::open(other, s.ciphertext, s.nonce.data(), s.tag.data(), "saker-ckpt/1/8/0/w", out, "w"),
                  saker::Error);
  s.ciphertext[500] ^= std::byte{1};
  CHECK_THROWS_AS(crypto::open(key, s.ciphertext, s.nonce.data(), s.tag.data(), "saker-ckpt/1/8/0/w", out, "w"),
                  saker::Error);
  // Unauthenticated plaintext never reaches the caller.
  CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0}; }));
}

TEST_CASE("the destination guard refuses forbidden directories and can require encryption", "[ckpt][crypto][guard]") {
  TempDir keys;
  TempDir dir;
  auto guard = std::make_shared<FakeGuard>();
  guard->classified = "patients";
  State st = make_state(1);  // lineage: imagenet@2012, patients@v3

  SECTION("encryption required and no key: refused, nothing written") {
    Checkpointer ck(dir.path(), opts({}, guard));
    CHECK_THROWS_WITH(ck.save(st), Catch::Contains("requires encryption"));
    CHECK_THROWS_WITH(ck.save_async(st), Catch::Contains("requires encryption"));
    CHECK(list_checkpoints(dir.path()).empty());
  }
  SECTION("encryption required and a key: saved") {
    Checkpointer ck(dir.path(), opts(make_key(keys, "k", 3), guard));
    CHECK(ck.save(st).committed);
    CHECK(guard->checks == 1);
  }
  SECTION("unclassified lineage needs no key") {
    st.lineage = {{"imagenet", "2012"}};
    Checkpointer ck(dir.path(), opts({}, guard));
    CHECK(ck.save(st).committed);
  }
  SECTION("residency: a directory outside the allowed zones is refused") {
    guard->forbidden = dir.path();
    Checkpointer ck(dir.path(), opts(make_key(keys, "k", 3), guard));
    CHECK_THROWS_WITH(ck.save(st), Catch::Contains("refusing to save step 1") && Catch::Contains("zone-a"));
    CHECK(list_checkpoints(dir.path()).empty());
  }
}
