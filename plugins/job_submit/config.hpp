// job_submit_saker.conf: the plugin's configuration, found beside slurm.conf (the
// directory of slurmctld's SLURM_CONF, else /etc/slurm). One key=value per line,
// '#' comments. Unknown keys are errors: a typo must not silently drop a rule.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace saker::job_submit {

struct Config {
  std::string policy;           // policy=/abs/path.yaml (required)
  std::string audit;            // audit=/abs/path.log (default: saker-audit.log beside the conf)
  std::string audit_key;        // audit_key=/abs/path (MAC key of the audit log's sealed head; optional)
  unsigned reload_interval_ms = 1000;  // reload_interval=SECONDS (how often the policy file is stat()ed)
  std::size_t max_policy_bytes = 4u << 20;  // max_policy_bytes=N (larger policy files are refused)
};

// The path of job_submit_saker.conf for a given SLURM_CONF value (may be null).
std::string config_path(const char* slurm_conf_env);

// Parses the text; problems (with line numbers) are appended to `errors`, which makes
// the configuration unusable (no policy: jobs that declare datasets are refused).
Config parse_config(const std::string& text, const std::string& path, std::vector<std::string>& errors);

// saker-audit.log beside the configuration file: decisions are recorded even when the
// configuration itself is missing or broken (those denials are worth an audit line too).
std::string default_audit_path(const std::string& config_file);

}  // namespace saker::job_submit
