// Trials from a Spec: trial i's values depend only on (seed, i, the parameter's name and
// distribution), never on the other trials, the machine or the time, so a sweep resumed
// tomorrow (or listed by `saker-sweep status`) sees the very same trials.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sweep/spec.hpp"

namespace saker::sweep {

struct Trial {
  std::size_t id = 0;
  // (parameter, value as the command receives it), in the space's order. Sampled
  // numbers are rounded to 6 significant digits, so the text IS the value.
  std::vector<std::pair<std::string, std::string>> values;
};

// Grid points vary fastest (the last grid axis fastest), then the random draws:
// trial i is grid point i % grid_size of draw i / grid_size.
std::vector<Trial> make_trials(const Spec& spec);

// "lr=0.001 width=64"
std::string describe(const Trial& trial);

// A uniform number in [0, 1) from (seed, trial, parameter name): SplitMix64 over an
// FNV-1a hash of the name, so it is the same on every machine.
double unit_draw(std::uint64_t seed, std::size_t trial, const std::string& name);

}  // namespace saker::sweep
