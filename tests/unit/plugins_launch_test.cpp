// The launch-time check's parts (plugins/spank): the node record the job prolog writes,
// the zone + grant decision, and the node's chained launch audit log.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "plugins/spank/launch_audit.hpp"
#include "policies/audit_head.hpp"
#include "plugins/spank/node_record.hpp"
#include "plugins/spank/residency.hpp"

using namespace saker::spank;
using saker::policy::DatasetRef;

namespace {

const saker::policy::Policy& site() {
  static const auto p = saker::policy::Policy::load_file(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml");
  return *p;
}

LaunchIdentity who(const std::string& account) { return {1000, "alice", {"users"}, account}; }

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/saker-launch-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a node record round-trips and rejects damage", "[spank][node_record]") {
  NodeRecord r;
  r.job_id = 42;
  r.uid = 1000;
  r.user = "alice";
  r.account = "medical";
  r.datasets = {{"patients", "v3"}};
  const NodeRecord back = parse_node_record(format_node_record(r));
  CHECK(back.job_id == 42);
  CHECK(back.account == "medical");
  CHECK(back.datasets == r.datasets);
  const std::string text = format_node_record(r);
  CHECK_THROWS(parse_node_record(text.substr(0, text.size() / 2)));  // truncated
  CHECK_THROWS(parse_node_record("garbage\n"));
  CHECK_THROWS(parse_node_record(text + "extra=1\n"));
  CHECK_THROWS(node_record_path("/d", "../etc", 1));
  CHECK(node_record_path("/d", "saker1", 7) == "/d/saker1/job-7");
}

TEST_CASE("a node record comes from the prolog's environment", "[spank][node_record]") {
  std::map<std::string, std::string> env{{"SLURM_JOB_UID", "1000"}, {"SLURM_JOB_USER", "alice"},
                                         {"SLURM_JOB_ACCOUNT", "medical"}, {"SPANK_SAKER_DATASETS", "patients@v3"}};
  const auto get = [&env](const char* k) -> const char* {
    const auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  NodeRecord r = node_record_from_env(5, get);
  CHECK(r.uid == 1000);
  CHECK(r.datasets == std::vector<DatasetRef>{{"patients", "v3"}});
  CHECK(r.problem.empty());
  env["SPANK_SAKER_DATASETS"] = "a,,b";
  r = node_record_from_env(5, get);
  CHECK_FALSE(r.problem.empty());  // malformed: its tasks are refused, never "no datasets"
  CHECK(r.datasets.empty());
}

TEST_CASE("a node record is written atomically and read back", "[spank][node_record]") {
  TempDir dir;
  const std::string path = node_record_path(dir.path + "/state", "saker1", 9);
  CHECK_FALSE(read_node_record(path));
  NodeRecord r;
  r.job_id = 9;
  r.user = "alice";
  write_node_record(path, r);
  const auto back = read_node_record(path);
  REQUIRE(back);
  CHECK(back->user == "alice");
}

// One step's hooks share one read (node_record.hpp): the second call does not touch the
// file, a damaged record throws the same error each time, another path is read afresh.
TEST_CASE("a step's node record is read once and shared by its hooks", "[spank][node_record]") {
  TempDir dir;
  const std::string path = node_record_path(dir.path + "/state", "saker1", 11);
  NodeRecord r;
  r.job_id = 11;
  r.user = "alice";
  write_node_record(path, r);
  REQUIRE(read_step_node_record(path));
  REQUIRE(std::remove(path.c_str()) == 0);
  const auto again = read_step_node_record(path);
  REQUIRE(again);
  CHECK(again->user == "alice");
  const std::string bad = node_record_path(dir.path + "/state", "saker1", 12);
  { std::ofstream(bad) << "saker-node-record 1\nuid=x\n"; }
  CHECK_THROWS_AS(read_step_node_record(bad), saker::Error);
  { std::ofstream(bad) << format_node_record(r); }  // repaired: this step still fails closed
  CHECK_THROWS_AS(read_step_node_record(bad), saker::Error);
  const std::string absent = node_record_path(dir.path + "/state", "saker1", 13);
  CHECK_FALSE(read_step_node_record(absent));
}

TEST_CASE("launch: zones and grants are both checked", "[spank][residency]") {
  const std::vector<DatasetRef> patients{{"patients", "v3"}};
  CHECK_FALSE(check_residency(site(), "saker1", patients, who("medical")).refuse);
  const ResidencyVerdict foreign = check_residency(site(), "saker3", patients, who("medical"));
  CHECK(foreign.refuse);
  CHECK_THAT(foreign.message, Catch::Contains("saker3"));
  const ResidencyVerdict no_grant = check_residency(site(), "saker1", patients, who("physics"));
  CHECK(no_grant.refuse);
  CHECK_THAT(no_grant.message, Catch::Contains("grant"));
  CHECK(check_residency(site(), "saker1", {{"genomes", ""}}, who("medical")).refuse);  // unknown dataset
  CHECK_FALSE(check_residency(site(), "saker3", {}, who("physics")).refuse);           // nothing declared
  CHECK_FALSE(check_residency(site(), "saker3", {{"imagenet", ""}}, who("physics")).refuse);
}

TEST_CASE("launch: no policy or no node name fails closed", "[spank][residency]") {
  const std::vector<DatasetRef> patients{{"patients", ""}};
  CHECK(check_residency("", "saker1", patients, who("medical")).refuse);
  CHECK(check_residency("/nonexistent/policy.yaml", "saker1", patients, who("medical")).refuse);
  CHECK(check_residency(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml", "", patients, who("medical")).refuse);
}

TEST_CASE("the launch audit log is a chain several processes can append to", "[spank][audit]") {
  TempDir dir;
  const std::string path = launch_audit_path(dir.path + "/state", "saker1");
  saker::policy::audit::Entry e;
  e.event = "launch";
  e.job_id = "3";
  e.decision_text = "deny";
  CHECK(append_launch_record(path, e).empty());
  CHECK(append_launch_record(path, e).empty());
  std::ifstream in(path);
  const auto result = saker::policy::audit::verify(in);
  CHECK(result.ok());
  CHECK(result.records == 2);
  std::string problem;
  const auto head = saker::policy::audit::read_head(path, "", problem);
  REQUIRE(head);  // sealed, so a deleted tail shows
  CHECK(head->last_id == 2);
  CHECK(head->log_bytes == std::filesystem::file_size(path));
}

TEST_CASE("a node record keeps the prolog's verdict and the policy's identity", "[spank][node_record]") {
  NodeRecord r;
  r.verdict = "deny";
  r.verdict_message = "no grant";
  r.policy_id = policy_file_id(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml");
  CHECK_FALSE(r.policy_id.empty());
  CHECK(policy_file_id("/nonexistent") == "");
  const NodeRecord back = parse_node_record(format_node_record(r));
  CHECK(back.verdict == "deny");
  CHECK(back.verdict_message == "no grant");
  CHECK(back.policy_id == r.policy_id);
}

TEST_CASE("a node record carries the transit requirement; an old record's verdict is rechecked", "[spank][node_record]") {
  NodeRecord r;
  r.verdict = "allow";
  r.policy_id = "1:2:3";
  r.transit = "encrypt";
  const std::string text = format_node_record(r);
  CHECK(parse_node_record(text).transit == "encrypt");
  // The previous format had no transit line: its cached verdict cannot say whether the
  // policy demands encryption, so the step must check the policy again.
  const std::string old = text.substr(0, text.find("transit="));
  const NodeRecord back = parse_node_record(old);
  CHECK(back.transit.empty());
  CHECK(back.verdict.empty());
  CHECK(back.policy_id.empty());
  CHECK_THROWS(parse_node_record(old.substr(0, old.rfind("policy_id="))));  // truncated further
}

TEST_CASE("launch: a classification's transit: encrypt reaches the verdict", "[spank][residency][transit]") {
  const auto p = saker::policy::Policy::load_string(R"(version: 1
zones: [{name: ae, country: AE}]
partitions: [{name: gpu-ae, zone: ae, nodes: "saker[1-2]", default: true}]
classifications: [{name: public}, {name: restricted, transit: encrypt}]
datasets:
  - {name: patients, classification: restricted, countries: [AE]}
  - {name: imagenet, classification: public}
)");
  CHECK(check_residency(*p, "saker1", {{"patients", "v3"}}, who("medical")).encrypt_transit);
  CHECK(check_residency(*p, "saker1", {{"imagenet", ""}, {"patients", ""}}, who("medical")).encrypt_transit);
  CHECK_FALSE(check_residency(*p, "saker1", {{"imagenet", ""}}, who("medical")).encrypt_transit);
  CHECK_FALSE(check_residency(*p, "saker1", {}, who("medical")).encrypt_transit);
  // The sample site policy asks no more than the default.
  CHECK_FALSE(check_residency(site(), "saker1", {{"patients", "v3"}}, who("medical")).encrypt_transit);
}
