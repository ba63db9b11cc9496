// plan_links: how a rank drives its links, from the machine's CPUs and the ranks that
// share them; the environment overrides, and bad values are refused by name.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "common/error.hpp"
#include "launcher/comm/tuning.hpp"

using saker::comm::LinkPlan;
using saker::comm::plan_links;

TEST_CASE("link plan follows the cores and the ranks sharing them", "[comm][tuning]") {
  // One rank on a 32-core node: busy-polling; the send thread is timed, not assumed.
  LinkPlan big = plan_links(32, 1);
  CHECK(big.send_thread == -1);
  CHECK(big.busy_poll_bytes >= (1u << 20));
  CHECK(big.direct_bytes == LinkPlan::kCalibrate);
  CHECK(big.exchange_bytes == LinkPlan::kCalibrate);
  // As many ranks as cores: each may spin.
  LinkPlan full = plan_links(2, 2);
  CHECK(full.send_thread == -1);
  CHECK(full.busy_poll_bytes == big.busy_poll_bytes);
  // More ranks than cores: spinning would hold a core another rank's copies need.
  CHECK(plan_links(2, 4).busy_poll_bytes < big.busy_poll_bytes);
}

TEST_CASE("link plan overrides from the environment", "[comm][tuning]") {
  setenv("SAKER_COMM_SEND_THREAD", "1", 1);
  setenv("SAKER_COMM_DIRECT_BYTES", "0", 1);
  setenv("SAKER_COMM_BUSY_POLL_BYTES", "0", 1);
  LinkPlan p = plan_links(1, 8);
  CHECK(p.send_thread == 1);
  CHECK(p.direct_bytes == 0);
  CHECK(p.exchange_bytes == 0);  // one limit given: the other is off, nothing is calibrated
  CHECK(p.busy_poll_bytes == 0);
  for (const char* bad : {"-1", "lots", "12k", ""}) {
    INFO("SAKER_COMM_DIRECT_BYTES='" << bad << "'");
    setenv("SAKER_COMM_DIRECT_BYTES", bad, 1);
    if (*bad) CHECK_THROWS_WITH(plan_links(1, 1), Catch::Contains("SAKER_COMM_DIRECT_BYTES"));
    else CHECK(plan_links(1, 1).direct_bytes == LinkPlan::kCalibrate);  // empty: unset
  }
  setenv("SAKER_COMM_SEND_THREAD", "0", 1);
  CHECK(plan_links(1, 8).send_thread == 0);
  unsetenv("SAKER_COMM_SEND_THREAD");
  unsetenv("SAKER_COMM_DIRECT_BYTES");
  unsetenv("SAKER_COMM_BUSY_POLL_BYTES");
}

TEST_CASE("cores and machine identity are measured", "[comm][tuning]") {
  CHECK(saker::comm::cores_online() >= 1);
  CHECK(saker::comm::machine_id() == saker::comm::machine_id());
  CHECK(saker::comm::machine_id().find(' ') == std::string::npos);  // one token in the rendezvous entry
}
