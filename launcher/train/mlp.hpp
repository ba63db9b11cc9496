// A small multilayer perceptron classifier (ReLU hidden layers, softmax
// cross-entropy), with every parameter in one flat float vector so that gradients are
// allreduced in one call, checkpointed as one tensor and hashed as one byte range.
// Loops run in a fixed order: the same inputs give bitwise the same outputs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "launcher/train/rng.hpp"

namespace saker::train {

struct MlpShape {
  int inputs = 0;
  std::vector<int> hidden;  // widths of the hidden layers, may be empty (logistic regression)
  int classes = 0;
  std::string str() const;  // "32-64-64-4"
  // Parses "64,64" (hidden widths); throws saker::Error on bad text.
  static std::vector<int> parse_hidden(const std::string& text);
};

struct BatchStats {
  double loss_sum = 0;   // sum over rows of the cross-entropy
  std::int64_t correct = 0;
  std::int64_t rows = 0;
};

// One named parameter tensor inside the flat parameter vector (checkpoints keep these
// names, so h5py users see the model's layers).
struct NamedParameter {
  std::string name;                   // fc1.weight, fc1.bias, fc2.weight, ...
  std::vector<std::uint64_t> shape;   // weight [out, in], bias [out]
  std::size_t offset = 0, count = 0;  // into parameters()
};

class Mlp {
 public:
  explicit Mlp(MlpShape shape);
  const MlpShape& shape() const { return shape_; }
  std::size_t parameter_count() const { return params_.size(); }
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }

  // Every layer's weight and bias, in parameter order (they tile parameters()).
  std::vector<NamedParameter> named_parameters() const;
  // He-normal weights and zero biases, drawn from rng in parameter order.
  void initialize(Rng& rng);
  // Adds the summed (not averaged) gradient over `rows` samples to grad (same length
  // as the parameters) and returns the batch's loss and accuracy counts.
  BatchStats accumulate_gradient(const float* x, const std::int32_t* y, int rows, std::span<float> grad) const;
  // Loss and accuracy counts without gradients.
  BatchStats evaluate(const float* x, const std::int32_t* y, int rows) const;

 private:
  struct Layer {
    int in, out;
    std::size_t weight_offset, bias_offset;
  };
  BatchStats run(const float* x, const std::int32_t* y, int rows, float* grad) const;

  MlpShape shape_;
  std::vector<Layer> layers_;
  std::vector<float> params_;
};

}  // namespace saker::train
