#include "sweep/trials.hpp"

#include <cmath>
#include <cstdio>

namespace saker::sweep {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

std::string six_digits(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

std::string draw(const Param& p, std::uint64_t seed, std::size_t trial) {
  const double u = unit_draw(seed, trial, p.name);
  switch (p.kind) {
    case Param::Kind::choice: {
      const auto i = std::min(p.values.size() - 1, static_cast<std::size_t>(u * static_cast<double>(p.values.size())));
      return p.values[i];
    }
    case Param::Kind::uniform: return six_digits(p.low + u * (p.high - p.low));
    case Param::Kind::log_uniform: return six_digits(std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low))));
    case Param::Kind::int_uniform: {
      const double span = p.high - p.low + 1;
      return std::to_string(static_cast<long long>(p.low + std::min(span - 1, std::floor(u * span))));
    }
    case Param::Kind::grid: break;
  }
  return {};
}

}  // namespace

std::string describe(const Trial& trial) {
  std::string s;
  for (const auto& [k, v] : trial.values) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

double unit_draw(std::uint64_t seed, std::size_t trial, const std::string& name) {
  const std::uint64_t x = splitmix64(splitmix64(seed) ^ splitmix64(trial + 1) ^ fnv1a(name));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

std::vector<Trial> make_trials(const Spec& spec) {
  std::vector<Trial> out;
  const std::size_t grid = spec.grid_size();
  for (std::size_t id = 0; id < spec.trial_count(); ++id) {
    Trial t;
    t.id = id;
    std::size_t point = id % grid;
    // Mixed radix over the grid axes, the last axis fastest.
    std::vector<std::size_t> digit(spec.space.size(), 0);
    for (std::size_t k = spec.space.size(); k-- > 0;) {
      const Param& p = spec.space[k];
      if (p.sampled()) continue;
      digit[k] = point % p.values.size();
      point /= p.values.size();
    }
    for (std::size_t k = 0; k < spec.space.size(); ++k) {
      const Param& p = spec.space[k];
      t.values.emplace_back(p.name, p.sampled() ? draw(p, spec.seed, id) : p.values[digit[k]]);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace saker::sweep
