// The telemetry keys of spank_saker.so's plugstack arguments (see spank_saker(8)).
#pragma once

#include <string>

#ifndef SAKER_PKGLIBEXECDIR
#define SAKER_PKGLIBEXECDIR "/usr/local/libexec/saker"
#endif

namespace saker::spank {

struct TelemetryConfig {
  std::string dir;              // telemetry=DIR: per-job records; empty = telemetry off
  double interval = 10;         // telemetry-interval=SECONDS
  std::string prometheus_dir;   // telemetry-prometheus=DIR: node_exporter textfile directory
  std::string sampler = SAKER_PKGLIBEXECDIR "/saker-sample-step";  // telemetry-sampler=PATH
  std::string group;            // telemetry-group=GROUP: operators who read every record
  std::string nvml;             // telemetry-nvml=LIBRARY: instead of libnvidia-ml.so.1
};

// When `key` is a telemetry key, stores its value and returns true; throws saker::Error
// naming `arg` for a bad value. false: not a telemetry key.
bool parse_telemetry_option(const std::string& arg, const std::string& key, const std::string& value,
                            TelemetryConfig& out);

constexpr const char* kTelemetryKeys =
    "telemetry=DIR, telemetry-interval=SECONDS, telemetry-prometheus=DIR, telemetry-sampler=PATH, "
    "telemetry-group=GROUP, telemetry-nvml=LIBRARY";

}  // namespace saker::spank
