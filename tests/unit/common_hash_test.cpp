#include <catch2/catch.hpp>

#include <string>

#include "common/hash.hpp"

using namespace saker::hash;

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("xxh3_128 is stable, seed-sensitive and streamable") {
  const std::string data(1000, 'x');
  const Digest128 once = xxh3_128(data.data(), data.size());
  CHECK(once == xxh3_128(data.data(), data.size()));
  CHECK_FALSE(once == xxh3_128(data.data(), data.size(), 1));
  CHECK(once.hex().size() == 32);

  Xxh3Stream stream;
  stream.update(data.data(), 300);
  stream.update(data.data() + 300, 700);
  CHECK(stream.digest() == once);
}

TEST_CASE("xxh3_128 changes with a single flipped bit") {
  std::string data(4096, '\0');
  const Digest128 clean = xxh3_128(data.data(), data.size());
  data[2049] ^= 0x10;
  CHECK_FALSE(xxh3_128(data.data(), data.size()) == clean);
}
