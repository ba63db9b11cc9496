#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.hpp"
#include "launcher/train/mlp.hpp"
#include "launcher/train/optimizer.hpp"

using namespace saker::train;

TEST_CASE("MLP shapes and parameter counts") {
  Mlp m(MlpShape{4, {8, 3}, 2});
  CHECK(m.parameter_count() == (4 * 8 + 8) + (8 * 3 + 3) + (3 * 2 + 2));
  CHECK(m.shape().str() == "4-8-3-2");
  CHECK(MlpShape::parse_hidden("64,32") == std::vector<int>{64, 32});
  CHECK(MlpShape::parse_hidden("").empty());
  CHECK_THROWS_AS(MlpShape::parse_hidden("64,x"), saker::Error);
  CHECK_THROWS_AS(MlpShape::parse_hidden("-3"), saker::Error);
  CHECK_THROWS_AS(Mlp(MlpShape{4, {}, 1}), saker::Error);
}

TEST_CASE("backpropagation matches finite differences") {
  Mlp m(MlpShape{3, {5}, 3});
  Rng rng(11);
  m.initialize(rng);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
  const std::vector<std::int32_t> y = {2, 0};
  std::vector<float> grad(m.parameter_count(), 0.0f);
  const BatchStats s = m.accumulate_gradient(x.data(), y.data(), 2, grad);
  CHECK(s.rows == 2);
  CHECK(s.loss_sum == Approx(m.evaluate(x.data(), y.data(), 2).loss_sum));
  for (std::size_t i = 0; i < m.parameter_count(); i += 3) {
    const float keep = m.parameters()[i];
    const float h = 1e-2f;
    m.parameters()[i] = keep + h;
    const double up = m.evaluate(x.data(), y.data(), 2).loss_sum;
    m.parameters()[i] = keep - h;
    const double down = m.evaluate(x.data(), y.data(), 2).loss_sum;
    m.parameters()[i] = keep;
    INFO("parameter " << i);
    CHECK(grad[i] == Approx((up - down) / (2 * h)).margin(2e-3).epsilon(2e-2));
  }
}

TEST_CASE("both optimizers reduce the loss of a fixed batch, and unknown ones are refused") {
  for (const char* kind : {"sgd", "adam"}) {
    Mlp m(MlpShape{2, {8}, 2});
    Rng rng(5);
    m.initialize(rng);
    const std::vector<float> x = {1, 1, -1, -1, 1, -1, -1, 1};
    const std::vector<std::int32_t> y = {0, 0, 1, 1};
    OptimizerConfig c;
    c.kind = kind;
    c.lr = 0.05;
    auto opt = make_optimizer(c, m.parameter_count());
    const double before = m.evaluate(x.data(), y.data(), 4).loss_sum;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> g(m.parameter_count(), 0.0f);
      m.accumulate_gradient(x.data(), y.data(), 4, g);
      for (float& v : g) v /= 4;
      opt->step(m.parameters(), g);
    }
    INFO(kind);
    CHECK(m.evaluate(x.data(), y.data(), 4).loss_sum < before * 0.5);
    CHECK(opt->steps_taken == 50);
    CHECK_FALSE(opt->buffers().empty());
  }
  CHECK_THROWS_AS(make_optimizer(OptimizerConfig{.kind = "lbfgs"}, 3), saker::Error);
  CHECK_THROWS_AS(make_optimizer(OptimizerConfig{.kind = "sgd", .lr = 0}, 3), saker::Error);
}
