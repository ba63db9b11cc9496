#include "plugins/spank/telemetry_config.hpp"

#include <cmath>

#include "common/error.hpp"

namespace saker::spank {
namespace {

std::string absolute(const std::string& arg, const std::string& value, const char* example) {
  if (value.empty() || value[0] != '/')
    throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "it needs an absolute path",
                        std::string("write ") + example));
  return value;
}

}  // namespace

bool parse_telemetry_option(const std::string& arg, const std::string& key, const std::string& value,
                            TelemetryConfig& out) {
  if (key == "telemetry") {
    out.dir = absolute(arg, value, "telemetry=/var/lib/saker/telemetry");
  } else if (key == "telemetry-interval") {
    double v = 0;
    std::size_t used = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || !std::isfinite(v) || v < 0.1 || v > 3600)
      throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "the interval is seconds between 0.1 and 3600",
                          "write telemetry-interval=10"));
    out.interval = v;
  } else if (key == "telemetry-prometheus") {
    out.prometheus_dir = absolute(arg, value, "telemetry-prometheus=/var/lib/prometheus/node-exporter");
  } else if (key == "telemetry-sampler") {
    out.sampler = absolute(arg, value, "telemetry-sampler=" SAKER_PKGLIBEXECDIR "/saker-sample-step");
  } else if (key == "telemetry-group") {
    if (value.empty())
      throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "telemetry-group needs a group name",
                          "write telemetry-group=hpc-ops"));
    out.group = value;
  } else if (key == "telemetry-nvml") {
    if (value.empty())
      throw Error(explain("plugstack.conf: bad argument '" + arg + "'", "telemetry-nvml needs a library",
                          "write telemetry-nvml=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
    out.nvml = value;
  } else {
    return false;
  }
  return true;
}

}  // namespace saker::spank
