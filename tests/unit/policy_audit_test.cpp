// The audit chain detects edited, deleted, inserted and reordered lines, and says where.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "policies/audit.hpp"
#include "policies/audit_log.hpp"

using namespace saker::policy;

namespace {

std::vector<std::string> make_log(int n) {
  audit::Chain chain;
  std::vector<std::string> lines;
  Decision d;
  d.kind = DecisionKind::deny;
  d.reasons = {"dataset patients@v3 is resident in AE; partition gpu-eu is in DE"};
  for (int i = 0; i < n; ++i) {
    audit::Entry e;
    e.event = "submit";
    e.uid = 1000 + static_cast<unsigned>(i);
    e.user = "u" + std::to_string(i);
    e.account = "acct";
    e.datasets = parse_dataset_list("patients@v3");
    e.decision = &d;
    e.revision = std::string(64, 'a');
    std::string line = chain.seal(audit::fields_json(e));
    line.pop_back();  // newline
    lines.push_back(line);
  }
  return lines;
}

audit::VerifyResult check(const std::vector<std::string>& lines) {
  std::stringstream text;
  for (const auto& l : lines) text << l << "\n";
  return audit::verify(text);
}

}  // namespace

TEST_CASE("an untouched log verifies", "[policy][audit]") {
  const auto r = check(make_log(5));
  CHECK(r.ok());
  CHECK(r.records == 5);
  const auto fields = audit::parse_record(make_log(1)[0]);
  REQUIRE(fields.size() > 10);
  CHECK(fields[0] == std::make_pair(std::string("id"), std::string("1")));
  bool saw_decision = false;
  for (const auto& [k, v] : fields) saw_decision = saw_decision || (k == "decision" && v == "deny");
  CHECK(saw_decision);
}

TEST_CASE("an edited line is found", "[policy][audit]") {
  auto lines = make_log(5);
  lines[2].replace(lines[2].find("\"deny\""), 6, "\"allow\"");
  const auto r = check(lines);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 3);
  CHECK(r.problems[0].what.find("was edited") != std::string::npos);
}

TEST_CASE("an edited last line is found", "[policy][audit]") {
  auto lines = make_log(3);
  lines[2].replace(lines[2].find("\"u2\""), 4, "\"u9\"");
  const auto r = check(lines);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].line == 3);
}

TEST_CASE("a deleted line is found", "[policy][audit]") {
  auto lines = make_log(5);
  lines.erase(lines.begin() + 1);
  const auto r = check(lines);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 2);
  CHECK(r.problems[0].what.find("records id 2 are missing") != std::string::npos);
  auto first_gone = make_log(3);
  first_gone.erase(first_gone.begin());
  CHECK(check(first_gone).problems.at(0).what.find("before line 1 were deleted") != std::string::npos);
}

TEST_CASE("reordered and inserted lines are found", "[policy][audit]") {
  auto lines = make_log(5);
  std::swap(lines[1], lines[2]);
  auto r = check(lines);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].line == 2);
  lines = make_log(5);
  const auto other = make_log(2);  // a valid record from another chain
  lines.insert(lines.begin() + 3, other[1]);
  r = check(lines);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].line == 4);
  CHECK(r.problems[0].what.find("reordered, duplicated or inserted") != std::string::npos);
  lines = make_log(3);
  lines.insert(lines.begin() + 1, "{\"id\":2,\"forged\":true}");
  r = check(lines);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].line == 2);
  CHECK(r.problems[0].what.find("not a Saker audit record") != std::string::npos);
}

TEST_CASE("the writer continues the chain of an existing file", "[policy][audit]") {
  char dir[] = "/tmp/saker-audit-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/audit.log";
  for (int round = 0; round < 2; ++round) {
    audit::Log log(path);  // a fresh writer, as after a slurmctld restart
    for (int i = 0; i < 3; ++i) CHECK(log.enqueue("\"event\":\"test\",\"n\":" + std::to_string(i)));
    CHECK(log.queued() == 3);
    CHECK(log.flush().empty());
    CHECK(log.queued() == 0);
  }
  std::ifstream in(path);
  const auto r = audit::verify(in);
  CHECK(r.ok());
  CHECK(r.records == 6);
  audit::Log bad("/nonexistent-dir/audit.log");
  bad.enqueue("\"event\":\"x\"");
  CHECK(bad.flush().find("cannot open audit log /nonexistent-dir/audit.log") != std::string::npos);
  CHECK(bad.queued() == 1);  // kept for the next try
  std::remove(path.c_str());
  rmdir(dir);
}
