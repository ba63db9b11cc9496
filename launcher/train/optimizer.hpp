// SGD with momentum and Adam over a flat parameter vector. Their state (momentum or
// first/second moments, and Adam's step count) is exposed by name so the checkpoint
// holds it and a resumed run takes exactly the steps the uninterrupted run takes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace saker::train {

struct OptimizerConfig {
  std::string kind = "adam";  // "adam" or "sgd"
  double lr = 1e-3;
  double momentum = 0.9;      // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam
  double weight_decay = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params -= update(grad); grad is the averaged gradient.
  virtual void step(std::span<float> params, std::span<const float> grad) = 0;
  // Named state buffers (all the same length as the parameters).
  virtual std::vector<std::pair<std::string, std::vector<float>*>> buffers() = 0;
  std::uint64_t steps_taken = 0;
};

// Throws saker::Error on an unknown kind or a non-positive learning rate.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t parameter_count);

}  // namespace saker::train
