#include "plugins/spank/config.hpp"

#include "common/error.hpp"

namespace saker::spank {
namespace {

const std::string kAcceptedKeys = std::string("accepted: policy=FILE, gpu-affinity=auto|none|explain, omp-bind=none|close|spread, topology=FILE, strict, state-dir=DIR, attest-key=FILE, attest-dir=DIR, attest-audit-log=FILE, openlineage-dir=DIR, openlineage-namespace=NAME, ") + kTelemetryKeys;

std::string need_value(const std::string& arg, const std::string& key, const std::string& value,
                       const std::string& example) {
  if (value.empty())
    throw Error(explain("plugstack.conf: bad argument '" + arg + "'", key + " needs a value", "write " + example));
  return value;
}

}  // namespace

AffinityMode parse_affinity_mode(const std::string& text, const std::string& where) {
  if (text == "auto") return AffinityMode::automatic;
  if (text == "none") return AffinityMode::none;
  if (text == "explain") return AffinityMode::explain;
  throw Error(explain(where + ": unknown mode '" + text + "'", "the modes are auto, none and explain",
                      "write auto (bind), none (leave the task alone) or explain (bind and print the plan)"));
}

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
    } else if (key == "gpu-affinity") {
      config.affinity = parse_affinity_mode(need_value(arg, key, value, "gpu-affinity=auto"),
                                            "plugstack.conf: gpu-affinity");
    } else if (key == "omp-bind") {
      config.omp_bind = affinity::parse_omp_bind(need_value(arg, key, value, "omp-bind=none"),
                                                 "plugstack.conf: omp-bind");
    } else if (key == "topology") {
      config.topology_path = need_value(arg, key, value, "topology=/var/spool/slurmd/saker-topology.xml");
    } else if (key == "state-dir") {
      config.state_dir = need_value(arg, key, value, "state-dir=/var/spool/saker");
    } else if (key == "attest-key") {
      config.attest_key = need_value(arg, key, value, "attest-key=/etc/slurm/saker-attest.key");
    } else if (key == "attest-dir") {
      config.attest_dir = need_value(arg, key, value, "attest-dir=/var/spool/saker-attest");
    } else if (key == "attest-audit-log") {
      config.attest_audit_log = need_value(arg, key, value, "attest-audit-log=/var/log/slurm/saker-audit.log");
    } else if (key == "openlineage-dir") {
      config.openlineage_dir = need_value(arg, key, value, "openlineage-dir=/var/spool/saker-openlineage");
    } else if (key == "openlineage-namespace") {
      config.openlineage_namespace = need_value(arg, key, value, "openlineage-namespace=slurm://mycluster");
    } else if (key == "strict") {
      if (eq != std::string::npos)
        throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "strict is a flag and takes no value",
                            "write strict, or leave it out"));
      config.strict = true;
    } else if (parse_telemetry_option(arg, key, value, config.telemetry)) {
    } else {
      throw Error(explain("plugstack.conf: unknown argument '" + arg + "' for spank_saker.so", kAcceptedKeys,
                          "fix or remove the argument"));
    }
  }
  return config;
}

}  // namespace saker::spank
