// What we trust, and why (zero trust: users control their job's environment and can
// run a modified srun):
//  - The node name comes from slurmstepd's OWN process environment (SLURMD_NODENAME,
//    which slurmd sets for the slurmstepd it forks, and which differs per node with
//    multiple slurmd), read with getenv(), never from the job's environment.
//  - The job's datasets, user and account come from the node record the job prolog
//    wrote as root from what slurmctld sent (node_record.hpp; needs PrologFlags=Alloc).
//    No RPC to slurmctld per step per node.
//  - What the step itself declares (--dataset on srun, the SLURM_SPANK_SAKER_DATASETS
//    it carries) is ADDED: a forged value can only make the check stricter.
#include "plugins/spank/residency_hook.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "common/log.hpp"
#include "plugins/common/identity.hpp"
#include "plugins/spank/launch_audit.hpp"
#include "plugins/spank/node_record.hpp"
#include "plugins/spank/residency.hpp"

namespace saker::spank {

namespace {

ResidencyVerdict g_verdict;

struct StepFacts {
  std::uint32_t job_id = 0, step_id = 0;
  std::string ref;  // the job as Slurm prints it: "123", "123_4" (array task), "123+1" (het component)
  std::string node;
  std::optional<NodeRecord> record;
  std::vector<policy::DatasetRef> step_datasets;  // what the step declared beyond the record
  std::vector<policy::DatasetRef> all;            // record + step
};

// The id in the form scontrol prints: an array task as A_T (S_JOB_ARRAY_ID/TASK_ID). A
// het component keeps its own job id here: SPANK gives no het offset in 22.05.
std::string job_ref_of(spank_t sp, std::uint32_t job_id) {
  std::uint32_t array_id = 0, task_id = 0;
  if (spank_get_item(sp, S_JOB_ARRAY_ID, &array_id) == ESPANK_SUCCESS &&
      spank_get_item(sp, S_JOB_ARRAY_TASK_ID, &task_id) == ESPANK_SUCCESS && array_id != 0 && array_id != job_id)
    return std::to_string(array_id) + "_" + std::to_string(task_id);
  return std::to_string(job_id);
}

void audit(const Config& config, const StepFacts& f, const std::string& decision, const std::string& why) {
  policy::audit::Entry e;
  e.event = "launch";
  if (f.record) {
    e.uid = f.record->uid;
    e.user = f.record->user;
    e.account = f.record->account;
  }
  e.job_id = f.ref;
  e.nodes = f.node;
  e.datasets = f.all;
  e.decision_text = decision;
  e.reasons_extra = {"node " + f.node + ", step " + std::to_string(f.job_id) + "." + std::to_string(f.step_id) +
                         (f.step_datasets.empty() ? "" : ", step declares " + policy::format_dataset_list(f.step_datasets)),
                     why};
  const std::string problem = append_launch_record(launch_audit_path(config.state_dir, f.node), e);
  if (!problem.empty()) saker::log::error("residency: launch audit: " + problem);
}

}  // namespace

int residency_record_job(const Config& config) {
  // Job prolog (slurmd, as root): never fails the prolog (that would drain the node).
  const char* node = std::getenv("SLURMD_NODENAME");
  const char* id = std::getenv("SLURM_JOB_ID");
  if (node == nullptr || id == nullptr) return 0;
  const auto job_id = static_cast<std::uint32_t>(std::strtoul(id, nullptr, 10));
  try {
    NodeRecord r = node_record_from_env(job_id, [](const char* k) { return std::getenv(k); });
    const bool check = r.problem.empty() && !r.datasets.empty();
    if ((check || !config.attest_key.empty()) && !config.policy_path.empty()) {
      // Once per job per node: the check every step that declares nothing more reuses,
      // and the zone and policy revision every step's attestation states.
      r.policy_id = policy_file_id(config.policy_path);
      ResidencyVerdict v;
      try {
        const policy::PolicyPtr p = policy::Policy::load_file(config.policy_path);
        r.zone = p->zone_of_node(node).value_or("");
        r.policy_revision = p->revision();
        const LaunchIdentity who{r.uid, r.user, plugins::identity_of(r.uid).groups, r.account};
        if (check) v = check_residency(*p, node, r.datasets, who);
      } catch (const std::exception&) {
        // The same refusal text the path-taking check gives for a policy that does not load.
        if (check) v = check_residency(config.policy_path, node, r.datasets, LaunchIdentity{r.uid, r.user, {}, r.account});
      }
      if (check) {
        r.verdict = v.refuse ? "deny" : "allow";
        r.verdict_message = v.message;
        r.transit = v.encrypt_transit ? "encrypt" : "";
      }
    }
    write_node_record(node_record_path(config.state_dir, node, job_id), r);
  } catch (const std::exception& e) {
    // Its tasks will find no record and be refused if they declare datasets.
    saker::log::error(std::string("residency: job prolog: ") + e.what());
  }
  return 0;
}

int residency_forget_job(const Config& config) {
  const char* node = std::getenv("SLURMD_NODENAME");
  const char* id = std::getenv("SLURM_JOB_ID");
  if (node == nullptr || id == nullptr) return 0;
  try {
    std::remove(node_record_path(config.state_dir, node, static_cast<std::uint32_t>(std::strtoul(id, nullptr, 10))).c_str());
  } catch (const std::exception& e) {
    saker::log::error(std::string("residency: job epilog: ") + e.what());
  }
  return 0;
}

void residency_prepare(spank_t sp, const Config& config, const std::vector<policy::DatasetRef>& option_value) {
  StepFacts f;
  const char* node = std::getenv("SLURMD_NODENAME");
  f.node = node != nullptr ? node : "";
  spank_get_item(sp, S_JOB_ID, &f.job_id);
  spank_get_item(sp, S_JOB_STEPID, &f.step_id);
  f.ref = job_ref_of(sp, f.job_id);
  std::vector<policy::DatasetRef> declared = option_value;
  char value[4096];
  // Empty: the step declares nothing of its own (it cannot remove the job's datasets).
  if (spank_getenv(sp, "SLURM_SPANK_SAKER_DATASETS", value, sizeof value) == ESPANK_SUCCESS && value[0] != '\0') {
    try {
      merge_datasets(declared, policy::parse_dataset_list(value));
    } catch (const std::exception& e) {
      g_verdict = {true, std::string("the step's dataset list is malformed: ") + e.what()};
      audit(config, f, "deny", g_verdict.message);
      return;
    }
  }
  try {
    f.record = read_step_node_record(node_record_path(config.state_dir, f.node, f.job_id));
  } catch (const std::exception& e) {
    g_verdict = {true, std::string("the job's record on this node cannot be read: ") + e.what()};
    audit(config, f, "deny", g_verdict.message);
    return;
  }
  if (f.record) f.all = f.record->datasets;
  for (const auto& d : declared)
    if (std::find(f.all.begin(), f.all.end(), d) == f.all.end()) f.step_datasets.push_back(d);
  merge_datasets(f.all, f.step_datasets);
  if (!f.record) {
    if (config.policy_path.empty()) return;
    // Fail closed: without the record nothing says what the job may read, or whose it is.
    g_verdict = {true, "node " + f.node + " has no record of job " + std::to_string(f.job_id) +
                           " (the spank_saker job prolog did not run or failed; PrologFlags=Alloc is required)"};
    audit(config, f, "deny", g_verdict.message);
    return;
  }
  if (!f.record->problem.empty()) {
    g_verdict = {true, f.record->problem};
    audit(config, f, "deny", g_verdict.message);
    return;
  }
  if (f.all.empty()) return;
  if (f.step_datasets.empty() && !f.record->verdict.empty() && !f.record->policy_id.empty() &&
      f.record->policy_id == policy_file_id(config.policy_path)) {
    g_verdict = {f.record->verdict == "deny", f.record->verdict_message, f.record->transit == "encrypt"};
  } else {
    const LaunchIdentity who{f.record->uid, f.record->user, plugins::identity_of(f.record->uid).groups,
                             f.record->account};
    g_verdict = check_residency(config.policy_path, f.node, f.all, who);
  }
  if (g_verdict.refuse || !f.step_datasets.empty())
    audit(config, f, g_verdict.refuse ? "deny" : "allow", g_verdict.message);
  if (!g_verdict.message.empty())
    saker::log::info("residency: " + policy::format_dataset_list(f.all) + " on " + f.node + ": " + g_verdict.message);
}

// The policy's transit requirement, in the task's environment: libsaker_comm refuses a
// weaker mode than SAKER_COMM_TRANSIT_REQUIRED, and SAKER_COMM_TRANSIT becomes encrypt
// unless the task chose a mode itself (then a weaker choice fails loudly, never silently).
int require_transit(spank_t sp) {
  if (!g_verdict.encrypt_transit || g_verdict.refuse) return 0;
  if (spank_setenv(sp, "SAKER_COMM_TRANSIT_REQUIRED", "encrypt", 1) != ESPANK_SUCCESS) {
    saker::log::error("residency: cannot set SAKER_COMM_TRANSIT_REQUIRED in the task's environment; task refused");
    return -1;
  }
  spank_setenv(sp, "SAKER_COMM_TRANSIT", "encrypt", 0);
  return 0;
}

int residency_enforce(spank_t sp) {
  if (require_transit(sp) != 0) return -1;
  if (g_verdict.message.empty()) return 0;
  // The task's stderr is the user's output at this point: say it where they look.
  std::fprintf(stderr, "saker: %s%s\n", g_verdict.message.c_str(),
               g_verdict.refuse ? "; the task was stopped before it started" : "");
  std::fflush(stderr);
  if (!g_verdict.refuse) return 0;
  saker::log::error("residency: task refused: " + g_verdict.message);
  return -1;
}

}  // namespace saker::spank
