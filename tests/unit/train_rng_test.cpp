#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.hpp"
#include "launcher/train/rng.hpp"

using saker::train::Rng;

TEST_CASE("the RNG is a pure function of its seed") {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    CHECK(x == b.next_u64());
    CHECK(x != c.next_u64());
  }
}

TEST_CASE("a saved RNG state continues the exact stream") {
  Rng a(7);
  for (int i = 0; i < 13; ++i) a.normal();
  const auto saved = a.save();
  CHECK(saved.size() == 32);
  std::vector<double> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(a.normal());
  Rng b(999);
  b.restore(saved);
  for (double e : expected) CHECK(b.normal() == e);
  CHECK_THROWS_AS(b.restore(std::vector<std::byte>(5)), saker::Error);
}

TEST_CASE("derived streams differ and draws are in range") {
  CHECK(Rng::derived(1, 0).next_u64() != Rng::derived(1, 1).next_u64());
  CHECK(Rng::derived(1, 5).next_u64() == Rng::derived(1, 5).next_u64());
  Rng r(3);
  double sum = 0, sq = 0;
  for (int i = 0; i < 20000; ++i) {
    const double u = r.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    CHECK(r.below(7) < 7);
    const double z = r.normal();
    sum += z;
    sq += z * z;
  }
  CHECK(std::abs(sum / 20000) < 0.05);
  CHECK(std::abs(sq / 20000 - 1.0) < 0.05);
}
