// The Ed25519 signer as spank_saker.so has it when libsodium's static archive is linked in
// (SAKER_ED25519_SODIUM_LINKED, plugins/spank/Makefile.inc): it must give RFC 8032's bytes
// and libcrypto's, without sodium_init(), or attestations would depend on how the plugin
// was built. Built into test_plugins only where configure found libsodium.a.
#include <catch2/catch.hpp>

#include <string>

#include "provenance/ed25519.hpp"

namespace ed25519 = saker::provenance::ed25519;

namespace {

std::string bytes(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

template <class A>
std::string str(const A& a) {
  return std::string(a.begin(), a.end());
}

ed25519::Seed seed_of(const std::string& hex) {
  ed25519::Seed seed{};
  const std::string s = bytes(hex);
  std::copy(s.begin(), s.end(), seed.begin());
  return seed;
}

}  // namespace

TEST_CASE("ed25519 linked in: the plugin's build signs with libsodium's archive, not a loaded library", "[ed25519]") {
  CHECK(std::string(ed25519::signing_library()) == "libsodium (linked in)");
}

TEST_CASE("ed25519 linked in: RFC 8032 section 7.1 tests 1 and 2", "[ed25519]") {
  const ed25519::Seed one = seed_of("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  CHECK(str(ed25519::public_of(one)) == bytes("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"));
  CHECK(str(ed25519::sign(one, ed25519::public_of(one), "")) ==
        bytes("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"));
  const ed25519::Seed two = seed_of("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb");
  CHECK(str(ed25519::public_of(two)) == bytes("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"));
  CHECK(str(ed25519::sign(two, "\x72")) ==
        bytes("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"));
}

TEST_CASE("ed25519 linked in: the same signatures as libcrypto for many keys and message lengths", "[ed25519]") {
  int checked = 0;
  for (int k = 0; k < 8; ++k) {
    ed25519::Seed seed{};
    for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<unsigned char>(i * 37 + k * 101 + 1);
    const ed25519::PublicKey pub = ed25519::public_of(seed);
    REQUIRE(str(pub) == str(ed25519::public_of_libcrypto(seed)));
    for (std::size_t len : {0u, 1u, 63u, 64u, 65u, 127u, 128u, 129u, 1000u, 4096u}) {
      std::string message(len, '\0');
      for (std::size_t i = 0; i < len; ++i) message[i] = static_cast<char>((i * 7 + k) & 0xff);
      const std::string want = str(ed25519::sign_libcrypto(seed, message));
      CHECK(str(ed25519::sign(seed, message)) == want);
      CHECK(str(ed25519::sign(seed, pub, message)) == want);
      ++checked;
    }
  }
  CHECK(checked == 80);
}
