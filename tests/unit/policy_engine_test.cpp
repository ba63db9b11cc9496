// Every decision kind, with the reasons users and auditors read.
#include <catch2/catch.hpp>

#include <string>

#include "saker/policy.hpp"

using namespace saker::policy;

namespace {

PolicyPtr site() { return Policy::load_file(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml"); }

PolicyPtr with(const std::string& from, const std::string& to) {
  std::string text = R"(version: 1
rules: {residency: enforce, access: enforce, gpu: enforce}
zones: [{name: ae, country: AE}, {name: eu, country: DE}]
partitions:
  - {name: gpu-ae, zone: ae, nodes: "saker[1-2]", gpus_per_node: 4, default: true}
  - {name: gpu-eu, zone: eu, nodes: saker3, gpus_per_node: 4}
datasets:
  - {name: patients, classification: restricted, countries: [AE]}
grants:
  - {users: [alice], datasets: [patients]}
)";
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return Policy::load_string(text);
}

JobRequest job(const std::string& datasets, const std::string& partition = "", const std::string& account = "medical") {
  JobRequest q;
  q.uid = 1000;
  q.user = "bob";
  q.account = account;
  q.partition = partition;
  if (!datasets.empty()) q.datasets = parse_dataset_list(datasets);
  return q;
}

bool has(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("allow: public data anywhere, and jobs without datasets", "[policy][engine]") {
  const auto p = site();
  auto d = p->evaluate(job("imagenet", "gpu-eu"));
  CHECK(d.kind == DecisionKind::allow);
  CHECK(d.reasons.empty());
  d = p->evaluate(job("", "gpu-eu"));
  CHECK(d.kind == DecisionKind::allow);
  d = p->evaluate(job("patients@v3", "gpu-ae"));
  CHECK(d.kind == DecisionKind::modify);  // allowed where asked; locality adds the replica's feature
  CHECK(d.partition.empty());
  CHECK(d.added_features == std::vector<std::string>{"lustre-ae"});
}

TEST_CASE("locality: a requested feature counts only by its exact name", "[policy][engine]") {
  const auto p = site();
  // "lustre-ae2" contains "lustre-ae": the replica's feature must still be added.
  for (const std::string f : {"lustre-ae2", "xlustre-ae", "lustre-ae|fast", "[lustre-ae|fast]", "lustre-ae*2"}) {
    auto q = job("patients@v3", "gpu-ae");
    q.features = f;
    INFO(f);
    CHECK(p->evaluate(q).added_features == std::vector<std::string>{"lustre-ae"});
  }
  for (const std::string f : {"lustre-ae", "fast&lustre-ae", "(lustre-ae)&fast", "fast,lustre-ae"}) {
    auto q = job("patients@v3", "gpu-ae");
    q.features = f;
    INFO(f);
    CHECK(p->evaluate(q).added_features.empty());
  }
}

TEST_CASE("deny: an explicit partition outside the dataset's zones names where it would run", "[policy][engine]") {
  const auto d = site()->evaluate(job("patients@v3", "gpu-eu"));
  CHECK(d.kind == DecisionKind::deny);
  REQUIRE(d.reasons.size() == 1);
  CHECK(d.reasons[0] == "dataset patients@v3 is resident in AE; partition gpu-eu is in DE; allowed: gpu-ae, cpu-ae");
  CHECK(d.partition.empty());
  CHECK(d.added_features.empty());
}

TEST_CASE("modify: no partition given, the job is routed into an allowed zone", "[policy][engine]") {
  const auto p = site();
  auto d = p->evaluate(job("telemetry"));  // EU-only dataset; default partition is gpu-ae
  CHECK(d.kind == DecisionKind::modify);
  CHECK(d.partition == "gpu-eu");
  CHECK(has(d.reasons, "partition set to gpu-eu"));
  CHECK(d.added_features.empty());  // lustre-eu declares no feature

  auto q = job("patients");
  q.gpus = 2;
  d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::modify);
  CHECK(d.partition == "gpu-ae");
  CHECK(d.features_after("") == "lustre-ae");
  CHECK(d.features_after("fast|slow") == "(fast|slow)&lustre-ae");
  CHECK(d.features_after("fast") == "fast&lustre-ae");
}

TEST_CASE("modify: a partition list is reduced to its allowed members", "[policy][engine]") {
  const auto d = site()->evaluate(job("patients", "gpu-eu,gpu-ae"));
  CHECK(d.kind == DecisionKind::modify);
  CHECK(d.partition == "gpu-ae");
  CHECK(has(d.reasons, "partition list reduced to gpu-ae"));
}

TEST_CASE("deny: no partition fits residency and the GPU request", "[policy][engine]") {
  auto q = job("patients");
  q.gpus = 3;
  q.gpus_per_task = 3;  // divides no node of the AE zone
  const auto d = site()->evaluate(q);
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "none of them fits"));
}

TEST_CASE("access: restricted data needs a grant by user, account, group or classification", "[policy][engine]") {
  const auto p = site();
  auto d = p->evaluate(job("patients", "gpu-ae", "physics"));
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "user bob (account physics) has no grant for restricted dataset patients"));
  auto q = job("patients", "gpu-ae", "physics");
  q.groups = {"staff", "clinicians"};
  CHECK(p->evaluate(q).kind != DecisionKind::deny);  // group grant by classification
  CHECK(p->evaluate(job("patients", "gpu-ae", "medical")).kind != DecisionKind::deny);  // account + glob
  const auto by_user = with("users: [alice]", "users: [bob]");
  CHECK(by_user->evaluate(job("patients", "gpu-ae", "x")).kind == DecisionKind::allow);
  const auto glob_miss = with("datasets: [patients]", "datasets: [\"pat?\"]");
  CHECK(glob_miss->evaluate(job("patients", "gpu-ae", "x")).kind == DecisionKind::deny);
  // A grant limited to a classification does not cover data of another classification.
  const auto wrong_class = with("datasets: [patients]}", "datasets: [patients], classifications: [public]}");
  auto q2 = job("patients", "gpu-ae");
  q2.user = "alice";
  CHECK(wrong_class->evaluate(q2).kind == DecisionKind::deny);
  CHECK(with("users: [alice]", "users: [carol]")->evaluate(q2).kind == DecisionKind::deny);
  CHECK(p->evaluate(job("imagenet", "gpu-ae", "physics")).kind == DecisionKind::allow);  // public: no grant
}

TEST_CASE("audit mode allows and records what would have been denied", "[policy][engine]") {
  const auto p = with("rules: {residency: enforce, access: enforce, gpu: enforce}",
                      "rules: {residency: audit, access: audit, gpu: audit}");
  auto q = job("patients@v3", "gpu-eu", "physics");
  q.gpus = 2;
  q.gpus_per_task = 3;
  const auto d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::allow);
  CHECK(has(d.would_deny, "would deny: dataset patients@v3 is resident in AE; partition gpu-eu is in DE"));
  CHECK(has(d.would_deny, "would deny: user bob (account physics) has no grant"));
  CHECK(has(d.would_deny, "would deny: --gpus-per-task=3 does not divide the 4 GPUs"));
  // Audit residency does not route either.
  const auto d2 = p->evaluate(job("patients", "", "medical"));
  CHECK(d2.kind == DecisionKind::allow);
}

TEST_CASE("unknown datasets and versions follow unknown_datasets", "[policy][engine]") {
  const auto p = site();
  auto d = p->evaluate(job("genomes"));
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "dataset genomes is not in the site policy"));
  d = p->evaluate(job("patients@v9", "gpu-ae"));
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "dataset patients has no version v9; known versions: v1, v2, v3"));
  const auto allow = with("rules:", "unknown_datasets: allow\nrules:");
  d = allow->evaluate(job("genomes"));
  CHECK(d.kind == DecisionKind::allow);
  CHECK(has(d.reasons, "allowed by unknown_datasets: allow"));
  d = with("rules:", "unknown_datasets: audit\nrules:")->evaluate(job("genomes"));
  CHECK(d.kind == DecisionKind::allow);
  CHECK(has(d.would_deny, "would deny: dataset genomes is not in the site policy"));
}

TEST_CASE("GPU rules: per-account maximum, CPU-only partitions, GPUs per task", "[policy][engine]") {
  const auto p = site();
  auto q = job("", "gpu-ae", "students");
  q.gpus = 4;
  auto d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "the job asks for 4 GPUs; account students may use at most 2 per job"));
  q.account = "research";
  q.gpus = 9;
  CHECK(has(p->evaluate(q).reasons, "at most 8 per job"));  // default_max_per_job
  q.gpus = 8;
  CHECK(p->evaluate(q).kind == DecisionKind::allow);

  q = job("", "cpu-ae", "research");
  q.gpus = 1;
  d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "partition cpu-ae is CPU-only and the job asks for 1 GPUs; GPU partitions: gpu-ae, gpu-eu"));

  q = job("", "gpu-eu", "research");
  q.gpus = 6;
  q.gpus_per_task = 3;
  d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "--gpus-per-task=3 does not divide the 4 GPUs of a node in partition gpu-eu; use 1, 2, 4"));
}

TEST_CASE("GPU jobs leave a CPU-only default partition", "[policy][engine]") {
  const auto p = with("gpus_per_node: 4, default: true}", "cpu_only: true, default: true}");
  auto q = job("");
  q.gpus = 2;
  const auto d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::modify);
  CHECK(d.partition == "gpu-eu");
  CHECK(has(d.reasons, "the default partition gpu-ae is CPU-only"));
}

TEST_CASE("launch-time check names node, zone, dataset and allowed zones", "[policy][launch]") {
  const auto p = site();
  CHECK(p->check_launch("saker1", parse_dataset_list("patients@v3")).allowed);
  CHECK(p->check_launch("saker3", parse_dataset_list("imagenet")).allowed);
  auto v = p->check_launch("saker3", parse_dataset_list("imagenet,patients@v3"));
  CHECK_FALSE(v.allowed);
  CHECK(v.message == "node saker3 is in zone eu (DE); dataset patients@v3 may only be processed in ae (AE)");
  v = p->check_launch("saker9", parse_dataset_list("patients"));
  CHECK_FALSE(v.allowed);
  CHECK(v.message.find("node saker9 is in no zone") != std::string::npos);
  v = p->check_launch("saker1", parse_dataset_list("genomes"));
  CHECK_FALSE(v.allowed);
  const auto audit = with("residency: enforce", "residency: audit");
  v = audit->check_launch("saker3", parse_dataset_list("patients"));
  CHECK(v.allowed);
  CHECK(v.message.find("would deny: node saker3 is in zone eu") != std::string::npos);
}

namespace {

Identity person(const std::string& user, const std::string& account, std::vector<std::string> groups = {}) {
  Identity who;
  who.uid = 1000;
  who.user = user;
  who.account = account;
  who.groups = std::move(groups);
  return who;
}

}  // namespace

TEST_CASE("launch access: zones and grants, by class of refusal", "[policy][launch]") {
  const auto p = site();
  const auto patients = parse_dataset_list("patients@v3");
  // Allowed: in zone, with a grant by account (glob), by group (classification), by user.
  CHECK(p->check_launch_access("saker1", patients, person("bob", "medical")).allowed);
  CHECK(p->check_launch_access("saker2", patients, person("bob", "physics", {"staff", "clinicians"})).allowed);
  CHECK(with("users: [alice]", "users: [bob]")->check_launch_access("saker1", parse_dataset_list("patients"),
                                                                      person("bob", "x")).allowed);
  // Public data needs neither zone nor grant; nothing declared is never refused.
  CHECK(p->check_launch_access("saker3", parse_dataset_list("imagenet"), person("bob", "physics")).allowed);
  CHECK(p->check_launch_access("saker3", {}, person("", "")).allowed);
  // No grant: named user, account and dataset.
  auto v = p->check_launch_access("saker1", patients, person("bob", "physics"));
  CHECK_FALSE(v.allowed);
  CHECK(v.message == "user bob (account physics) has no grant for restricted dataset patients@v3; a grant in " +
                         p->source() + " must name the user, the account or one of the user's groups");
  // No user name recorded: the uid stands in; no account: "none".
  v = p->check_launch_access("saker1", patients, person("", ""));
  CHECK_FALSE(v.allowed);
  CHECK(v.message.rfind("user 1000 (account none) has no grant", 0) == 0);
  // A group that is not a grant's, and a grant's group only by name prefix, do not count.
  CHECK_FALSE(p->check_launch_access("saker1", patients, person("bob", "physics", {"clinician", "clinicians2"})).allowed);
  // Zone before grant: the residency refusal is the one reported.
  v = p->check_launch_access("saker3", patients, person("bob", "physics"));
  CHECK_FALSE(v.allowed);
  CHECK(v.message == "node saker3 is in zone eu (DE); dataset patients@v3 may only be processed in ae (AE)");
  // A grant does not make a foreign node right, and an unknown node is in no zone.
  CHECK_FALSE(p->check_launch_access("saker3", patients, person("bob", "medical")).allowed);
  CHECK_FALSE(p->check_launch_access("saker9", patients, person("bob", "medical")).allowed);
  CHECK_FALSE(p->check_launch_access("", patients, person("bob", "medical")).allowed);
  // Unknown datasets and versions follow unknown_datasets (deny here) before anything else.
  v = p->check_launch_access("saker1", parse_dataset_list("patients@v9"), person("bob", "medical"));
  CHECK_FALSE(v.allowed);
  CHECK(v.message.find("has no version v9") != std::string::npos);
  CHECK_FALSE(p->check_launch_access("saker1", parse_dataset_list("genomes"), person("bob", "medical")).allowed);
  // One bad dataset among good ones refuses the task.
  CHECK_FALSE(p->check_launch_access("saker1", parse_dataset_list("imagenet,patients,telemetry"),
                                     person("bob", "medical")).allowed);
}

TEST_CASE("launch access: audit-mode rules allow with their notes; no routing, no GPU rules", "[policy][launch]") {
  const auto audit = with("rules: {residency: enforce, access: enforce, gpu: enforce}",
                          "rules: {residency: audit, access: audit, gpu: enforce}");
  const auto v = audit->check_launch_access("saker3", parse_dataset_list("patients"), person("bob", "x"));
  CHECK(v.allowed);
  CHECK(v.message.find("would deny: node saker3 is in zone eu (DE)") != std::string::npos);
  CHECK(v.message.find("would deny: user bob (account x) has no grant") != std::string::npos);
  // Only access audited: the zone still refuses.
  const auto access_audit = with("access: enforce", "access: audit");
  CHECK_FALSE(access_audit->check_launch_access("saker3", parse_dataset_list("patients"), person("bob", "x")).allowed);
  const auto granted_elsewhere = access_audit->check_launch_access("saker1", parse_dataset_list("patients"), person("bob", "x"));
  CHECK(granted_elsewhere.allowed);
  CHECK(granted_elsewhere.message.find("would deny: user bob") != std::string::npos);
  // The same job evaluate() would route or refuse for its partition is judged only on
  // where the task is: a node of the CPU-only partition is in the dataset's zone.
  CHECK(site()->check_launch_access("saker2", parse_dataset_list("patients"), person("bob", "medical")).allowed);
}

TEST_CASE("checkpoint destinations follow the lineage's residency", "[policy][checkpoint]") {
  const auto p = site();
  const auto lineage = parse_dataset_list("patients@v3");
  CHECK(p->check_checkpoint_destination("/lustre/ae/run1/ckpt", lineage).allowed);
  auto v = p->check_checkpoint_destination("/lustre/eu/run1", lineage);
  CHECK_FALSE(v.allowed);
  CHECK(v.message.find("is on storage lustre-eu in zone eu (DE)") != std::string::npos);
  CHECK(v.message.find("write it under /lustre/ae") != std::string::npos);
  CHECK_FALSE(p->check_checkpoint_destination("/lustre/ae/../eu/x", lineage).allowed);
  CHECK_FALSE(p->check_checkpoint_destination("/lustre/aex/run", lineage).allowed);  // not under the mount
  v = p->check_checkpoint_destination("/tmp/ckpt", lineage);
  CHECK_FALSE(v.allowed);
  CHECK(v.message.find("is on no storage system") != std::string::npos);
  CHECK(p->check_checkpoint_destination("/tmp/ckpt", parse_dataset_list("imagenet")).allowed);
  CHECK(p->check_checkpoint_destination("/lustre/eu/x", parse_dataset_list("imagenet")).allowed);
}

TEST_CASE("encryption is required for chosen classifications", "[policy][checkpoint]") {
  const auto p = site();
  CHECK(p->encryption_required(parse_dataset_list("imagenet,patients")));
  CHECK_FALSE(p->encryption_required(parse_dataset_list("imagenet,telemetry")));
  CHECK(p->encryption_required(parse_dataset_list("genomes")));  // unknown: fail closed
}

TEST_CASE("a classification's transit: encrypt demands sealed traffic for its jobs", "[policy][transit]") {
  // The default classifications ask no more than auth, even for restricted data.
  const auto plain = with("grants:", "grants:");
  CHECK_FALSE(plain->transit_encryption_required(parse_dataset_list("patients@v3")));
  const auto classes = [](const std::string& restricted_transit) {
    return with("datasets:", "classifications:\n  - {name: public}\n  - {name: restricted, requires_grant: true" +
                                 restricted_transit + R"(}
  - {name: internal, transit: auth}
datasets:
  - {name: telemetry, classification: internal}
  - {name: open, classification: public})");
  };
  const auto p = classes(", transit: encrypt");
  CHECK(p->transit_encryption_required(parse_dataset_list("patients@v3")));
  CHECK(p->transit_encryption_required(parse_dataset_list("open,patients")));
  CHECK_FALSE(p->transit_encryption_required(parse_dataset_list("open,telemetry")));
  CHECK_FALSE(p->transit_encryption_required({}));
  // An unknown dataset could be restricted: fail closed, unless the site allows unknown data.
  CHECK(p->transit_encryption_required(parse_dataset_list("genomes")));
  // The revision covers the key: a site that drops it gets a new policy revision.
  CHECK(p->revision() != classes("")->revision());
  CHECK_FALSE(classes("")->transit_encryption_required(parse_dataset_list("patients@v3")));
}

TEST_CASE("placement-only re-checks (job_modify) skip access but keep residency", "[policy][engine]") {
  const auto p = site();
  auto q = job("patients@v3", "cpu-ae", "");
  q.user = "root";
  q.placement_only = true;
  CHECK(p->evaluate(q).kind != DecisionKind::deny);
  q.partition = "gpu-eu";
  const auto d = p->evaluate(q);
  CHECK(d.kind == DecisionKind::deny);
  CHECK(has(d.reasons, "is resident in AE; partition gpu-eu is in DE"));
}
