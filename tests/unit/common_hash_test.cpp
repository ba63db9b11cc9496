#include <catch2/catch.hpp>

#include <string>

#include "common/hash.hpp"

using namespace saker::hash;

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
