// bench_allreduce's alpha-beta model: the fit recovers a known link, and the
// algorithms' costs follow their step and volume counts.
#include <catch2/catch.hpp>

#include "bench/bench_allreduce_model.hpp"

using namespace bench::model;

TEST_CASE("the per-size fit recovers a known link", "[bench][model]") {
  const double alpha = 30e-6, beta = 1e-9;  // 30 us, 1 GB/s
  std::map<double, double> t2;
  for (double n = 4096; n <= 256.0 * (1 << 20); n *= 4) t2[n] = ring(Fit{alpha, beta}, 2, n);
  PerSize m = fit_per_size(t2);
  REQUIRE(m.ok());
  CHECK(m.alpha == Approx(alpha + 4096 * beta / 2));  // the smallest size's time, per step
  Fit big = m.at(64.0 * (1 << 20));
  CHECK(big.beta == Approx(beta).epsilon(1e-3));
  // Four ranks predicted from two: 6 steps, 1.5 N bytes.
  CHECK(ring(big, 4, 1e6) == Approx(6 * m.alpha + 1.5e6 * big.beta));
  // The nearest measured size on a log scale.
  CHECK(m.at(5000).beta == m.beta.begin()->second);
  CHECK_FALSE(fit_per_size({}).ok());
}

TEST_CASE("algorithm costs follow steps and volume", "[bench][model]") {
  Fit f{10e-6, 1e-9};
  // Recursive halving/doubling: 2 log2 P steps and the ring's volume.
  CHECK(halving_doubling(f, 8, 1e6) == Approx(6 * 10e-6 + 2.0 * 7 / 8 * 1e6 * 1e-9));
  CHECK(ring(f, 8, 1e6) == Approx(14 * 10e-6 + 2.0 * 7 / 8 * 1e6 * 1e-9));
  CHECK(tree(f, 8, 1e6) == Approx(6 * (10e-6 + 1e6 * 1e-9)));
  CHECK(ring(f, 1, 1e6) == 0);
  // Local ranks sharing cores: only the bandwidth term stretches.
  CHECK(ring_local(f, 4, 1e6, 2) == Approx(6 * 10e-6 + 1.5e6 * 1e-9 * 2));
  CHECK(ring_local(f, 2, 1e6, 2) == Approx(ring(f, 2, 1e6)));
  CHECK(hierarchical(f, Fit{1e-6, 0.1e-9}, 16, 2, 1e6) == Approx(2 * ring(Fit{1e-6, 0.1e-9}, 2, 1e6) + ring(f, 16, 1e6)));
}
