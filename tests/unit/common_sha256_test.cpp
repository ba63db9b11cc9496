// Saker's own SHA-256 and HMAC-SHA-256 (common/sha256.hpp) against the published vectors
// and, as an independent reference, against OpenSSL on random inputs of every length
// around the block and padding boundaries, fed whole and in random pieces.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "common/hash.hpp"
#include "common/sha256.hpp"

using namespace saker::hash;

namespace {

std::string openssl_sha256(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REQUIRE(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1);
  return to_hex(md, len);
}

std::string openssl_hmac(const std::string& key, const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REQUIRE(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
               reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), md, &len) != nullptr);
  return to_hex(md, len);
}

std::string random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string hex(const Sha256::Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-4 example vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks: the padding does not fit after 56 bytes.
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                   "mnopqrstnopqrstu") == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  Sha256 million;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) million.update(chunk);
  CHECK(hex(million.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("hmac-sha256 matches RFC 4231") {
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hmac_sha256_hex(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a key longer than the block is hashed first.
  CHECK(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("sha256 and hmac-sha256 agree with OpenSSL on every length to 300 and random pieces") {
  std::mt19937_64 rng(20261125);
  for (std::size_t n = 0; n <= 300; ++n) {
    const std::string data = random_bytes(rng, n);
    INFO("length " << n);
    REQUIRE(sha256_hex(data) == openssl_sha256(data));
    // The same bytes fed in random pieces.
    Sha256 pieces;
    for (std::size_t at = 0; at < n;) {
      const std::size_t take = std::min<std::size_t>(n - at, rng() % 80);
      pieces.update(std::string_view(data).substr(at, take));
      at += take;
    }
    REQUIRE(hex(pieces.finish()) == openssl_sha256(data));
    const std::string key = random_bytes(rng, rng() % 150);
    REQUIRE(hmac_sha256_hex(key, data) == openssl_hmac(key, data));
  }
  const std::string big = random_bytes(rng, 1 << 20);
  CHECK(sha256_hex(big) == openssl_sha256(big));
}

TEST_CASE("one flipped bit changes the digest") {
  std::string data(200, 'x');
  const std::string clean = sha256_hex(data);
  data[130] ^= 0x01;
  CHECK(sha256_hex(data) != clean);
}
