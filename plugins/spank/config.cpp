#include "plugins/spank/config.hpp"

#include "common/error.hpp"

namespace saker::spank {

Config parse_config(const std::vector<std::string>& args) {
  Config config;
  for (const auto& arg : args) {
    const auto eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? std::string() : arg.substr(eq + 1);
    if (key == "policy") {
      if (value.empty())
        throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "policy needs a file",
                            "write policy=/etc/slurm/saker-policy.yaml"));
      config.policy_path = value;
    } else {
      throw Error(explain("plugstack.conf: unknown argument '" + arg + "' for spank_saker.so",
                          "accepted keys: policy=FILE", "fix or remove the argument"));
    }
  }
  return config;
}

}  // namespace saker::spank
