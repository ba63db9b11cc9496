#include "plugins/job_submit/config.hpp"

#include <optional>
#include <sstream>

namespace saker::job_submit {

namespace {
constexpr const char* kKeys = "policy, audit, audit_key, reload_interval, max_policy_bytes";

// Whole number in [1, max] or nullopt.
std::optional<unsigned long> whole(const std::string& value, unsigned long max) {
  if (value.empty() || value.size() > 10 || value.find_first_not_of("0123456789") != std::string::npos) return {};
  const unsigned long v = std::stoul(value);
  if (v == 0 || v > max) return {};
  return v;
}
}  // namespace

std::string config_path(const char* slurm_conf_env) {
  std::string dir = "/etc/slurm";
  if (slurm_conf_env != nullptr && *slurm_conf_env != '\0') {
    const std::string conf = slurm_conf_env;
    const auto slash = conf.rfind('/');
    dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : conf.substr(0, slash));
  }
  return dir + (dir.back() == '/' ? "" : "/") + "job_submit_saker.conf";
}

Config parse_config(const std::string& text, const std::string& path, std::vector<std::string>& errors) {
  Config c;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  const auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    ++n;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      errors.push_back(where + "'" + line + "' is not key=value; accepted keys: " + std::string(kKeys) + "");
      continue;
    }
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (key == "policy" || key == "audit" || key == "audit_key") {
      if (value.empty() || value[0] != '/') {
        errors.push_back(where + key + " needs an absolute path, got '" + value + "'");
        continue;
      }
      (key == "policy" ? c.policy : key == "audit" ? c.audit : c.audit_key) = value;
    } else if (key == "reload_interval") {
      const auto v = whole(value, 3600);
      if (!v) {
        errors.push_back(where + "reload_interval needs whole seconds between 1 and 3600, got '" + value + "'");
        continue;
      }
      c.reload_interval_ms = static_cast<unsigned>(*v) * 1000;
    } else if (key == "max_policy_bytes") {
      const auto v = whole(value, 1ul << 30);
      if (!v) {
        errors.push_back(where + "max_policy_bytes needs a size in bytes between 1 and 1073741824, got '" + value + "'");
        continue;
      }
      c.max_policy_bytes = *v;
    } else {
      errors.push_back(where + "unknown key '" + key + "'; accepted keys: " + std::string(kKeys) + "");
    }
  }
  if (c.policy.empty() && errors.empty()) errors.push_back(path + ": no policy=/path/to/policy.yaml line");
  if (c.audit.empty()) c.audit = default_audit_path(path);
  return c;
}

std::string default_audit_path(const std::string& config_file) {
  const auto slash = config_file.rfind('/');
  return (slash == std::string::npos ? std::string(".") : config_file.substr(0, slash)) + "/saker-audit.log";
}

}  // namespace saker::job_submit
