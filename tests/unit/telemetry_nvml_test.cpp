// The NVML path through the test-only stand-in libnvidia-ml.so.1 (nvml_standin.cpp),
// loaded by the same dlopen as on a GPU node: values, absent GPUs, NVML errors.
#include <cstdlib>

#include <catch2/catch.hpp>

#include "telemetry/nvml.hpp"
#include "tests/unit/telemetry_test_util.hpp"

using namespace saker::telemetry;
using saker::telemetry::testing::TempDir;
using saker::telemetry::testing::write_file;

namespace {

// Scripts the stand-in; it reads the script at nvmlInit_v2 (inside Nvml::open).
std::unique_ptr<Nvml> open_scripted(const TempDir& dir, const std::string& script, std::string* why) {
  write_file(dir / "nvml.script", script);
  ::setenv("SAKER_NVML_SCRIPT", (dir / "nvml.script").c_str(), 1);
  return Nvml::open(why, SAKER_NVML_STANDIN);
}

const char* kTwoGpus =
    "gpu minor=0 util=95 memutil=40 used=1000 total=16000 power_mw=250000 energy_mj=5000 temp=70 sm=1980 throttle=0 ecc=0\n"
    "gpu minor=3 util=0 memutil=0 used=10 total=16000 power_mw=60000 energy_mj=100 temp=35 sm=210 throttle=1 ecc=2\n";

}  // namespace

TEST_CASE("nvml: scripted values come back per GPU, by minor number", "[telemetry][nvml]") {
  TempDir dir;
  std::string why;
  auto nvml = open_scripted(dir, kTwoGpus, &why);
  REQUIRE(nvml);
  CHECK(nvml->visible_indexes() == std::vector<unsigned>{0, 3});
  auto s = nvml->sample({3, 0});
  REQUIRE(s.size() == 2);
  CHECK(s[0].index == 3);
  CHECK(s[0].present);
  CHECK(s[0].util_percent == 0u);
  CHECK(s[0].throttle_reasons == 1u);
  CHECK(s[0].ecc_uncorrected == 2u);
  CHECK(s[1].util_percent == 95u);
  CHECK(s[1].mem_used == 1000u);
  CHECK(s[1].mem_total == 16000u);
  CHECK(s[1].power_w == Approx(250.0));
  CHECK(s[1].energy_mj == 5000u);
  CHECK(s[1].temperature_c == 70u);
  CHECK(s[1].sm_clock_mhz == 1980u);
  CHECK(s[1].errors == 0);
  CHECK(describe_throttle_reasons(0x44) == "sw-power-cap,hw-thermal");
  CHECK(describe_throttle_reasons(0) == "none");
}

TEST_CASE("nvml: absent GPUs", "[telemetry][nvml]") {
  TempDir dir;
  std::string why;
  SECTION("the step holds a GPU NVML does not see") {
    auto nvml = open_scripted(dir, kTwoGpus, &why);
    REQUIRE(nvml);
    auto s = nvml->sample({7});
    REQUIRE(s.size() == 1);
    CHECK_FALSE(s[0].present);
    CHECK_FALSE(s[0].util_percent);
  }
  SECTION("no GPU at all") {
    auto nvml = open_scripted(dir, "", &why);
    REQUIRE(nvml);
    CHECK(nvml->visible_indexes().empty());
    CHECK_FALSE(nvml->sample({0})[0].present);
  }
  SECTION("device enumeration fails") {
    auto nvml = open_scripted(dir, std::string(kTwoGpus) + "count 999\n", &why);
    REQUIRE(nvml);
    CHECK(nvml->visible_indexes().empty());
  }
  SECTION("a GPU without a minor number is skipped, the others kept") {
    auto nvml = open_scripted(dir, "gpu util=1 total=1 used=0\ngpu minor=1 util=2 total=1 used=0\n", &why);
    REQUIRE(nvml);
    CHECK(nvml->visible_indexes() == std::vector<unsigned>{1});
  }
}

TEST_CASE("nvml: error returns", "[telemetry][nvml]") {
  TempDir dir;
  std::string why;
  SECTION("one function fails: counted, its figure absent, the rest read") {
    auto nvml = open_scripted(dir, std::string(kTwoGpus) + "fail nvmlDeviceGetPowerUsage 15\n", &why);
    REQUIRE(nvml);
    auto s = nvml->sample({0});
    CHECK_FALSE(s[0].power_w);
    CHECK(s[0].errors == 1);
    CHECK(s[0].last_error == "nvmlDeviceGetPowerUsage: GPU is lost");
    CHECK(s[0].util_percent == 95u);
    CHECK(s[0].energy_mj == 5000u);
  }
  SECTION("NOT_SUPPORTED is silence, not an error") {
    auto nvml = open_scripted(dir, "gpu minor=0 util=50 memutil=1 total=10 used=1\n", &why);
    REQUIRE(nvml);
    auto s = nvml->sample({0});
    CHECK(s[0].errors == 0);
    CHECK_FALSE(s[0].ecc_uncorrected);
    CHECK_FALSE(s[0].energy_mj);
    CHECK(s[0].util_percent == 50u);
  }
  SECTION("out-of-range values are dropped") {
    auto nvml = open_scripted(dir, "gpu minor=0 util=250 memutil=1 total=10 used=20\n", &why);
    REQUIRE(nvml);
    auto s = nvml->sample({0});
    CHECK_FALSE(s[0].util_percent);
    CHECK_FALSE(s[0].mem_used);
  }
  SECTION("nvmlInit fails: no NVML, and why") {
    CHECK_FALSE(open_scripted(dir, "init 9\n", &why));
    CHECK(why.find("nvmlInit failed: Driver Not Loaded") != std::string::npos);
  }
}

TEST_CASE("nvml: XID errors arrive through the event set, once each", "[telemetry][nvml]") {
  TempDir dir;
  std::string why;
  SECTION("events of one GPU") {
    auto nvml = open_scripted(dir, std::string(kTwoGpus) + "xid minor=3 code=13\nxid minor=3 code=79\n", &why);
    REQUIRE(nvml);
    auto s = nvml->sample({0, 3});
    CHECK(s[0].xid_events == 0);
    CHECK(s[1].xid_events == 2);
    CHECK(s[1].last_xid == 79);
    CHECK(nvml->sample({0, 3})[1].xid_events == 0);  // drained
  }
  SECTION("no event support: every other figure still read") {
    auto nvml = open_scripted(dir, std::string(kTwoGpus) + "xid minor=3 code=79\nfail nvmlEventSetCreate 3\n", &why);
    REQUIRE(nvml);
    auto s = nvml->sample({3});
    CHECK(s[0].xid_events == 0);
    CHECK(s[0].errors == 0);
    CHECK(s[0].util_percent == 0u);
  }
}

TEST_CASE("nvml: the library itself absent or not NVML", "[telemetry][nvml]") {
  std::string why;
  CHECK_FALSE(Nvml::open(&why, "/nonexistent/libnvidia-ml.so.1"));
  CHECK(why.find("no NVIDIA driver on this node") != std::string::npos);
  why.clear();
  CHECK_FALSE(Nvml::open(&why, "libc.so.6"));
  CHECK(why.find("has no nvmlInit_v2") != std::string::npos);
}
