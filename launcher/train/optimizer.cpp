#include "launcher/train/optimizer.hpp"

#include <cmath>

#include "common/error.hpp"

namespace saker::train {
namespace {

class SgdMomentum final : public Optimizer {
 public:
  SgdMomentum(const OptimizerConfig& c, std::size_t n) : c_(c), velocity_(n, 0.0f) {}
  void step(std::span<float> p, std::span<const float> g) override {
    const float lr = static_cast<float>(c_.lr), mu = static_cast<float>(c_.momentum),
                wd = static_cast<float>(c_.weight_decay);
    for (std::size_t i = 0; i < p.size(); ++i) {
      velocity_[i] = mu * velocity_[i] + g[i] + wd * p[i];
      p[i] -= lr * velocity_[i];
    }
    ++steps_taken;
  }
  std::vector<std::pair<std::string, std::vector<float>*>> buffers() override { return {{"optim.velocity", &velocity_}}; }

 private:
  OptimizerConfig c_;
  std::vector<float> velocity_;
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, std::size_t n) : c_(c), m_(n, 0.0f), v_(n, 0.0f) {}
  void step(std::span<float> p, std::span<const float> g) override {
    ++steps_taken;
    const double t = static_cast<double>(steps_taken);
    const float step_size = static_cast<float>(c_.lr * std::sqrt(1.0 - std::pow(c_.beta2, t)) / (1.0 - std::pow(c_.beta1, t)));
    const float b1 = static_cast<float>(c_.beta1), b2 = static_cast<float>(c_.beta2), eps = static_cast<float>(c_.eps),
                wd = static_cast<float>(c_.weight_decay);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const float gi = g[i] + wd * p[i];
      m_[i] = b1 * m_[i] + (1.0f - b1) * gi;
      v_[i] = b2 * v_[i] + (1.0f - b2) * gi * gi;
      p[i] -= step_size * m_[i] / (std::sqrt(v_[i]) + eps);
    }
  }
  std::vector<std::pair<std::string, std::vector<float>*>> buffers() override {
    return {{"optim.adam_m", &m_}, {"optim.adam_v", &v_}};
  }

 private:
  OptimizerConfig c_;
  std::vector<float> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::size_t n) {
  if (!(c.lr > 0)) throw Error(explain("learning rate " + std::to_string(c.lr), "it must be positive", "pass e.g. --lr 0.01"));
  if (c.kind == "sgd") return std::make_unique<SgdMomentum>(c, n);
  if (c.kind == "adam") return std::make_unique<Adam>(c, n);
  throw Error(explain("optimizer '" + c.kind + "'", "saker-train knows sgd (with momentum) and adam",
                      "pass --optimizer sgd or --optimizer adam"));
}

}  // namespace saker::train
