// spank_saker.so's telemetry keys in plugstack.conf: good values, and bad ones by class
// (each refused with the argument named, so a typo never silently turns telemetry off).
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "plugins/spank/config.hpp"

using saker::spank::parse_config;

TEST_CASE("telemetry keys: defaults and values", "[plugins][telemetry]") {
  auto off = parse_config({});
  CHECK(off.telemetry.dir.empty());
  CHECK(off.telemetry.interval == 10);
  CHECK(off.telemetry.sampler.ends_with("/saker-sample-step"));
  auto on = parse_config({"telemetry=/var/lib/saker/telemetry", "telemetry-interval=0.5", "telemetry-prometheus=/var/lib/prom",
                          "telemetry-sampler=/opt/saker/saker-sample-step", "telemetry-group=hpc-ops",
                          "telemetry-nvml=/opt/nvidia/libnvidia-ml.so.1"});
  CHECK(on.telemetry.dir == "/var/lib/saker/telemetry");
  CHECK(on.telemetry.interval == 0.5);
  CHECK(on.telemetry.prometheus_dir == "/var/lib/prom");
  CHECK(on.telemetry.sampler == "/opt/saker/saker-sample-step");
  CHECK(on.telemetry.group == "hpc-ops");
  CHECK(on.telemetry.nvml == "/opt/nvidia/libnvidia-ml.so.1");
}

TEST_CASE("telemetry keys: bad values by class", "[plugins][telemetry]") {
  for (const char* bad : {"telemetry", "telemetry=", "telemetry=relative/dir", "telemetry-interval=", "telemetry-interval=fast",
                          "telemetry-interval=10s", "telemetry-interval=0", "telemetry-interval=-1", "telemetry-interval=nan",
                          "telemetry-interval=inf", "telemetry-interval=99999", "telemetry-prometheus=prom",
                          "telemetry-sampler=saker-sample-step", "telemetry-group=", "telemetry-nvml=", "telemetry-dir=/x"}) {
    INFO(bad);
    try {
      parse_config({bad});
      FAIL("accepted");
    } catch (const saker::Error& e) {
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
}
