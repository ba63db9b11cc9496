#include "launcher/train/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.hpp"

namespace saker::train {

std::string MlpShape::str() const {
  std::ostringstream s;
  s << inputs;
  for (int h : hidden) s << "-" << h;
  s << "-" << classes;
  return s.str();
}

std::vector<int> MlpShape::parse_hidden(const std::string& text) {
  std::vector<int> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int w = 0;
    try {
      w = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || w <= 0 || w > 65536) {
      throw Error(explain("hidden layer width '" + item + "' in '" + text + "'",
                          "widths are positive integers up to 65536", "write e.g. --layers 64,64"));
    }
    widths.push_back(w);
  }
  return widths;
}

Mlp::Mlp(MlpShape shape) : shape_(std::move(shape)) {
  if (shape_.inputs <= 0 || shape_.classes < 2) {
    throw Error(explain("MLP " + shape_.str(), "it needs at least one input and two classes",
                        "check the dataset's X and y (saker-train make-data --classes)"));
  }
  std::vector<int> widths = {shape_.inputs};
  widths.insert(widths.end(), shape_.hidden.begin(), shape_.hidden.end());
  widths.push_back(shape_.classes);
  std::size_t offset = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    Layer layer{widths[l], widths[l + 1], offset, 0};
    offset += static_cast<std::size_t>(layer.in) * layer.out;
    layer.bias_offset = offset;
    offset += layer.out;
    layers_.push_back(layer);
  }
  params_.assign(offset, 0.0f);
}

void Mlp::initialize(Rng& rng) {
  for (const Layer& layer : layers_) {
    const double scale = std::sqrt(2.0 / layer.in);
    for (std::size_t i = 0; i < static_cast<std::size_t>(layer.in) * layer.out; ++i) {
      params_[layer.weight_offset + i] = static_cast<float>(rng.normal() * scale);
    }
    std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(layer.bias_offset), layer.out, 0.0f);
  }
}

BatchStats Mlp::accumulate_gradient(const float* x, const std::int32_t* y, int rows, std::span<float> grad) const {
  SAKER_ASSERT(grad.size() == params_.size(), "gradient size differs from the parameters");
  return run(x, y, rows, grad.data());
}

BatchStats Mlp::evaluate(const float* x, const std::int32_t* y, int rows) const { return run(x, y, rows, nullptr); }

BatchStats Mlp::run(const float* x, const std::int32_t* y, int rows, float* grad) const {
  BatchStats stats;
  const std::size_t depth = layers_.size();
  std::vector<std::vector<float>> act(depth + 1);  // act[0] = input, act[l+1] = output of layer l
  std::vector<float> delta, prev_delta;
  for (int r = 0; r < rows; ++r) {
    act[0].assign(x + static_cast<std::size_t>(r) * shape_.inputs, x + static_cast<std::size_t>(r + 1) * shape_.inputs);
    for (std::size_t l = 0; l < depth; ++l) {
      const Layer& L = layers_[l];
      std::vector<float>& out = act[l + 1];
      out.assign(L.out, 0.0f);
      for (int o = 0; o < L.out; ++o) {
        const float* w = &params_[L.weight_offset + static_cast<std::size_t>(o) * L.in];
        float sum = params_[L.bias_offset + o];
        for (int i = 0; i < L.in; ++i) sum += w[i] * act[l][i];
        out[o] = (l + 1 < depth) ? std::max(sum, 0.0f) : sum;
      }
    }
    // Softmax cross-entropy on the logits, computed stably in double.
    const std::vector<float>& logits = act[depth];
    const int label = y[r];
    SAKER_ASSERT(label >= 0 && label < shape_.classes, "label outside the classes (checked when loading)");
    const float top = *std::max_element(logits.begin(), logits.end());
    double denom = 0;
    for (float z : logits) denom += std::exp(static_cast<double>(z - top));
    stats.loss_sum += std::log(denom) - static_cast<double>(logits[label] - top);
    const int predicted = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    stats.correct += predicted == label ? 1 : 0;
    ++stats.rows;
    if (grad == nullptr) continue;

    delta.assign(shape_.classes, 0.0f);
    for (int c = 0; c < shape_.classes; ++c) {
      delta[c] = static_cast<float>(std::exp(static_cast<double>(logits[c] - top)) / denom) - (c == label ? 1.0f : 0.0f);
    }
    for (std::size_t l = depth; l-- > 0;) {
      const Layer& L = layers_[l];
      const std::vector<float>& in = act[l];
      prev_delta.assign(L.in, 0.0f);
      for (int o = 0; o < L.out; ++o) {
        const float d = delta[o];
        float* gw = grad + L.weight_offset + static_cast<std::size_t>(o) * L.in;
        const float* w = &params_[L.weight_offset + static_cast<std::size_t>(o) * L.in];
        for (int i = 0; i < L.in; ++i) {
          gw[i] += d * in[i];
          prev_delta[i] += d * w[i];
        }
        grad[L.bias_offset + o] += d;
      }
      if (l > 0) {
        for (int i = 0; i < L.in; ++i) prev_delta[i] = in[i] > 0.0f ? prev_delta[i] : 0.0f;  // ReLU'
      }
      delta.swap(prev_delta);
    }
  }
  return stats;
}

std::vector<NamedParameter> Mlp::named_parameters() const {
  std::vector<NamedParameter> out;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const std::string fc = "fc" + std::to_string(l + 1);
    const auto in = static_cast<std::uint64_t>(L.in), n_out = static_cast<std::uint64_t>(L.out);
    out.push_back({fc + ".weight", {n_out, in}, L.weight_offset, static_cast<std::size_t>(in * n_out)});
    out.push_back({fc + ".bias", {n_out}, L.bias_offset, static_cast<std::size_t>(n_out)});
  }
  return out;
}

}  // namespace saker::train
