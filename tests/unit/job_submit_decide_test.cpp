// Every decision path of job_submit_saker.so (plugins/job_submit/decide.hpp), against
// the two-zone sample policy: submissions, het components, updates in every id form and
// every state of the index, fail-closed cases and what is audited.
#include <catch2/catch.hpp>

#include "plugins/common/dataset_marker.hpp"
#include "plugins/job_submit/decide.hpp"

using namespace saker::job_submit;
using saker::policy::DatasetRef;
using saker::policy::JobRequest;

namespace {

PolicyView site() {
  return {saker::policy::Policy::load_file(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml"), ""};
}

JobRequest medical(const std::string& partition, std::vector<DatasetRef> datasets = {{"patients", "v3"}}) {
  JobRequest q;
  q.uid = 1000;
  q.user = "alice";
  q.account = "medical";
  q.partition = partition;
  q.datasets = std::move(datasets);
  return q;
}

JobFacts known(std::vector<DatasetRef> datasets, std::string partition = "gpu-ae", std::string features = "lustre-ae") {
  JobFacts f;
  f.state = JobFacts::State::known;
  f.datasets = std::move(datasets);
  f.partition = std::move(partition);
  f.features = std::move(features);
  return f;
}

Update update(const std::string& ref, JobFacts facts) {
  Update u;
  u.ref_text = ref;
  u.request.uid = 1000;
  u.request.user = "alice";
  u.facts = std::move(facts);
  return u;
}

Update move_to(const std::string& ref, const std::string& partition, JobFacts facts) {
  Update u = update(ref, std::move(facts));
  u.partition_given = true;
  u.request.partition = partition;
  return u;
}

}  // namespace

TEST_CASE("submit: allowed in zone, the marker goes to admin_comment", "[job_submit][decide]") {
  const Outcome o = decide_submit(site(), medical("gpu-ae"), nullptr);
  CHECK_FALSE(o.refuse);
  CHECK(o.audit);
  REQUIRE(o.set_admin_comment);
  CHECK(*o.set_admin_comment == "saker-datasets=patients@v3");
  CHECK(o.set_features == std::optional<std::string>("lustre-ae"));
  CHECK(o.audit_entry().decision != nullptr);
}

TEST_CASE("submit: out of zone, without a grant, unknown dataset are refused and audited", "[job_submit][decide]") {
  CHECK(decide_submit(site(), medical("gpu-eu"), nullptr).refuse);
  JobRequest physics = medical("gpu-ae", {{"patients", ""}});
  physics.account = "physics";
  const Outcome no_grant = decide_submit(site(), physics, nullptr);
  CHECK(no_grant.refuse);
  CHECK(no_grant.audit);
  CHECK_THAT(no_grant.user_message, Catch::Contains("no grant"));
  CHECK(decide_submit(site(), medical("gpu-ae", {{"genomes", ""}}), nullptr).refuse);
  CHECK_FALSE(decide_submit(site(), medical("gpu-ae"), nullptr).set_partition);
}

TEST_CASE("submit: routed when no partition is given", "[job_submit][decide]") {
  const Outcome o = decide_submit(site(), medical("", {{"telemetry", ""}}), nullptr);
  CHECK_FALSE(o.refuse);
  CHECK(o.set_partition == std::optional<std::string>("gpu-eu"));
}

TEST_CASE("submit: a marker the submitter forged in admin_comment is replaced or dropped", "[job_submit][decide]") {
  const Outcome with = decide_submit(site(), medical("gpu-ae"), "hi saker-datasets=imagenet");
  CHECK(with.set_admin_comment == std::optional<std::string>("hi saker-datasets=patients@v3"));
  const Outcome without = decide_submit(site(), medical("gpu-ae", {}), "saker-datasets=patients");
  CHECK(without.set_admin_comment == std::optional<std::string>(""));
  CHECK_FALSE(decide_submit(site(), medical("gpu-ae", {}), "note").set_admin_comment);
}

TEST_CASE("submit: no policy refuses jobs with datasets only", "[job_submit][decide]") {
  const PolicyView none{nullptr, "the file is missing"};
  const Outcome refused = decide_submit(none, medical("gpu-ae"), nullptr);
  CHECK(refused.refuse);
  CHECK(refused.audit);
  CHECK_THAT(refused.user_message, Catch::Contains("the file is missing"));
  const Outcome plain = decide_submit(none, medical("gpu-ae", {}), nullptr);
  CHECK_FALSE(plain.refuse);
  CHECK(plain.decision_text == "allow");
}

TEST_CASE("submit: a malformed request is refused and audited", "[job_submit][decide]") {
  const Outcome o = refuse_malformed("submit", medical("gpu-ae", {}), "bad list");
  CHECK(o.refuse);
  CHECK(o.audit);
  CHECK(o.audit_entry().decision_text == "deny");
}

TEST_CASE("het components must declare the same datasets", "[job_submit][decide][het]") {
  const std::vector<DatasetRef> none, patients{{"patients", "v3"}};
  CHECK_FALSE(check_het_component(0, none, medical("gpu-eu", none)));
  const auto later = check_het_component(1, none, medical("gpu-ae", patients));  // the attack
  REQUIRE(later);
  CHECK(later->refuse);
  CHECK(later->audit);
  CHECK(check_het_component(1, patients, medical("gpu-eu", none)));  // the other order
  CHECK_FALSE(check_het_component(2, patients, medical("gpu-ae", patients)));
  CHECK(check_het_component(1, std::nullopt, medical("gpu-ae", none)));  // never saw component 0
}

TEST_CASE("modify: out of zone refused, in zone allowed, both audited", "[job_submit][decide][modify]") {
  const Outcome out = decide_modify(site(), move_to("7", "gpu-eu", known({{"patients", "v3"}})));
  CHECK(out.refuse);
  CHECK(out.audit);
  CHECK(out.audit_entry().job_id == "7");
  const Outcome in = decide_modify(site(), move_to("7", "cpu-ae", known({{"patients", "v3"}})));
  CHECK_FALSE(in.refuse);
  CHECK(in.audit);
}

TEST_CASE("modify: every id form is judged on its own facts", "[job_submit][decide][modify]") {
  for (const char* ref : {"7", "7+1", "7_3"}) {
    INFO(ref);
    const Outcome o = decide_modify(site(), move_to(ref, "gpu-eu", known({{"patients", "v3"}})));
    CHECK(o.refuse);
    CHECK(o.job_ref == ref);
  }
}

TEST_CASE("modify: an id that does not parse is refused when it touches placement", "[job_submit][decide][modify]") {
  CHECK(decide_modify(site(), move_to("7_[1-3]", "gpu-eu", known({}))).refuse);
  CHECK_FALSE(decide_modify(site(), update("7_[1-3]", known({}))).refuse);
}

TEST_CASE("modify: a job not indexed yet or with a malformed marker fails closed", "[job_submit][decide][modify]") {
  JobFacts unknown;
  unknown.problem = "job 9 is not indexed yet";
  const Outcome o = decide_modify(site(), move_to("9", "cpu-ae", unknown));
  CHECK(o.refuse);
  CHECK(o.audit);
  CHECK_THAT(o.reasons.front(), Catch::Contains("not indexed yet"));
  Update features = update("9", unknown);
  features.features_given = true;
  CHECK(decide_modify(site(), features).refuse);
  Update note = update("9", unknown);
  note.admin_comment = "note";
  CHECK(decide_modify(site(), note).refuse);
  CHECK_FALSE(decide_modify(site(), update("9", unknown)).refuse);  // e.g. a comment or time limit
  JobFacts bad;
  bad.state = JobFacts::State::malformed;
  bad.problem = "the recorded dataset list does not parse";
  CHECK(decide_modify(site(), move_to("9", "gpu-ae", bad)).refuse);
}

TEST_CASE("modify: a features-only update never moves the partition", "[job_submit][decide][modify]") {
  Update u = update("7", known({{"patients", "v3"}}));
  u.features_given = true;
  u.request.features = "";
  const Outcome kept = decide_modify(site(), u);
  CHECK_FALSE(kept.refuse);
  CHECK_FALSE(kept.set_partition);
  CHECK(kept.set_features == std::optional<std::string>("lustre-ae"));  // locality re-added
  // A job whose partition no longer fits (policy changed): refused, not moved.
  Update stale = update("7", known({{"patients", "v3"}}, "gpu-eu", ""));
  stale.features_given = true;
  const Outcome o = decide_modify(site(), stale);
  CHECK(o.refuse);
  CHECK_FALSE(o.set_partition);
}

TEST_CASE("modify: a job without datasets is left alone", "[job_submit][decide][modify]") {
  const Outcome o = decide_modify(site(), move_to("7", "gpu-eu", known({})));
  CHECK_FALSE(o.refuse);
  CHECK_FALSE(o.audit);
}

TEST_CASE("modify: an operator's admin_comment keeps the marker", "[job_submit][decide][modify]") {
  Update u = update("7", known({{"patients", "v3"}}));
  u.admin_comment = "checked by ops";
  const Outcome o = decide_modify(site(), u);
  CHECK_FALSE(o.refuse);
  CHECK(o.set_admin_comment == std::optional<std::string>("checked by ops saker-datasets=patients@v3"));
  u.admin_comment = "saker-datasets=";  // an attempt to blank the list
  CHECK(saker::plugins::read_marker(decide_modify(site(), u).set_admin_comment->c_str()).datasets.size() == 1);
}

TEST_CASE("modify: no policy refuses moves of jobs with datasets", "[job_submit][decide][modify]") {
  const Outcome o = decide_modify({nullptr, "gone"}, move_to("7", "cpu-ae", known({{"patients", "v3"}})));
  CHECK(o.refuse);
  CHECK(o.audit);
}

TEST_CASE("modify: an account change is judged for grants", "[job_submit][decide][modify]") {
  JobFacts facts = known({{"patients", "v3"}});
  facts.account = "medical";
  Update u = update("7", facts);
  u.account_given = true;
  u.request.account = "physics";
  const Outcome o = decide_modify(site(), u);
  CHECK(o.refuse);
  CHECK(o.audit);
  CHECK_THAT(o.user_message, Catch::Contains("grant"));
  u.request.account = "medical";
  CHECK_FALSE(decide_modify(site(), u).refuse);
  // The record names the account the job keeps when the update does not change it.
  Update move = move_to("7", "cpu-ae", facts);
  CHECK(decide_modify(site(), move).audit_entry().account == "medical");
}
