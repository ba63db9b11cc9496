// spank_saker.so's plugstack.conf arguments (`required spank_saker.so key=value ...`).
// Unknown keys are errors, as in pyxis: a typo must not silently disable a check.
#pragma once

#include <string>
#include <vector>

namespace saker::spank {

struct Config {
  std::string policy_path;  // policy=FILE: the site policy, for the launch-time residency check
};

// Parses the plugstack arguments. Throws saker::Error naming the bad argument and
// listing the accepted keys.
Config parse_config(const std::vector<std::string>& args);

}  // namespace saker::spank
