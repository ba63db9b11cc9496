#include <catch2/catch.hpp>

#include <string>

#include "common/hash.hpp"

using namespace saker::hash;

TEST_CASE("xxh3_128 gives libxxhash's digests (checkpoints written before stay verifiable)") {
  // From libxxhash 0.8.1's XXH3_128bits_withSeed; hash.cpp now compiles xxHash in.
  CHECK(xxh3_128("", 0).hex() == "99aa06d3014798d86001c324468d497f");
  CHECK(xxh3_128("abc", 3).hex() == "06b05ab6733a618578af5f94892f3950");
  CHECK(xxh3_128("abc", 3, 7).hex() == "8a3c1b87ceb230ee48ff56f569e39912");
  const std::string x(1000, 'x');
  CHECK(xxh3_128(x.data(), x.size()).hex() == "50a1af5a5f2dcf01c0a4877b962cba82");
  CHECK(xxh3_128(x.data(), x.size(), 7).hex() == "ea5cebe014ff1d14a6b046c257309584");
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
