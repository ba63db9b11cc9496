// saker-policy lineage's library (policies/lineage.hpp): which records admitted a job with
// a dataset, by version, from a real hash-chained log built with the writer's own code.
#include <catch2/catch.hpp>

#include <sstream>

#include "policies/audit.hpp"
#include "policies/lineage.hpp"

using namespace saker::policy;

namespace {

audit::Entry entry(const std::string& event, const std::string& job, const std::string& datasets) {
  audit::Entry e;
  e.event = event;
  e.user = "alice";
  e.account = "medical";
  e.job_id = job;
  e.partition = "gpu-ae,gpu-eu";
  e.datasets = parse_dataset_list(datasets);
  return e;
}

// submit allow v3, submit deny v3, submit route (no version), launch allow v3 (job 12),
// launch deny v3 (job 13), submit allow imagenet, a line that is not a record.
std::string sample_log() {
  audit::Chain chain;
  std::string log;
  Decision allow, deny, route;
  deny.kind = DecisionKind::deny;
  route.kind = DecisionKind::modify;
  route.partition = "gpu-ae";
  auto e = entry("submit", "", "patients@v3,imagenet");
  e.decision = &allow;
  log += chain.seal(audit::fields_json(e));
  e = entry("submit", "", "patients@v3");
  e.decision = &deny;
  log += chain.seal(audit::fields_json(e));
  e = entry("submit", "", "patients");
  e.decision = &route;
  log += chain.seal(audit::fields_json(e));
  e = entry("launch", "12", "patients@v3");
  e.nodes = "saker1";
  e.decision_text = "allow";
  log += chain.seal(audit::fields_json(e));
  e = entry("launch", "13", "patients@v3");
  e.decision_text = "deny";
  log += chain.seal(audit::fields_json(e));
  e = entry("submit", "", "imagenet@2012");
  e.decision = &allow;
  log += chain.seal(audit::fields_json(e));
  return log + "not a record\n";
}

std::vector<lineage::Row> query(const std::string& dataset) {
  std::istringstream in(sample_log());
  return lineage::admitted_with("ctl.log", in, parse_dataset_list(dataset).at(0));
}

}  // namespace

TEST_CASE("lineage: a version finds the jobs that named it, and flags those that named none") {
  const auto rows = query("patients@v3");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].record == 1);
  CHECK(rows[0].event == "submit");
  CHECK(rows[0].decision == "allow");
  CHECK(rows[0].datasets == std::vector<std::string>{"patients@v3"});
  CHECK_FALSE(rows[0].version_unpinned);
  CHECK(rows[1].record == 3);
  CHECK(rows[1].decision == "route");
  CHECK(rows[1].partition == "gpu-ae");  // where it was routed, not what was asked
  CHECK(rows[1].version_unpinned);
  CHECK(rows[2].record == 4);
  CHECK(rows[2].job_id == "12");
  CHECK(rows[2].nodes == "saker1");
}

TEST_CASE("lineage: denied jobs, other versions and other names are not listed") {
  CHECK(query("patients@v2").size() == 1);  // only the job that named no version
  CHECK(query("patients@v2")[0].version_unpinned);
  CHECK(query("patients").size() == 3);
  CHECK(query("patient").empty());
  CHECK(query("imagenet").size() == 2);
  REQUIRE(query("imagenet@2012").size() == 2);  // the pinned one, and the one that named no version
  CHECK(query("imagenet@2012")[0].version_unpinned);
  CHECK_FALSE(query("imagenet@2012")[1].version_unpinned);
  CHECK(query("telemetry").empty());
}

TEST_CASE("lineage: table and JSON") {
  const auto dataset = parse_dataset_list("patients@v3").at(0);
  const std::string t = lineage::table(dataset, query("patients@v3"));
  CHECK(t.rfind("JOB ", 0) == 0);
  CHECK(t.find("\n12   launch") != std::string::npos);
  CHECK(t.find("patients (no version named)") != std::string::npos);
  CHECK(t.find("ctl.log:4") != std::string::npos);
  CHECK(lineage::table(dataset, {}) == "no job was admitted with patients@v3 in these logs\n");
  const std::string j = lineage::json(dataset, query("patients@v3"));
  CHECK(j.rfind("{\"dataset\":\"patients@v3\",\"jobs\":[{\"job_id\":null,", 0) == 0);
  CHECK(j.find("\"job_id\":\"12\"") != std::string::npos);
  CHECK(j.find("\"version_unpinned\":true") != std::string::npos);
}
