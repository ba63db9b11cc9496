// Launch-time residency and access re-check (the last line): before a task starts on a
// node, check the node's zone against every dataset the job or the step declares, AND
// that the job's user/account holds the grants those datasets need. It catches a policy
// changed after submission, a node moved between partitions, steps that declare datasets
// the job did not (srun --jobid=J --overlap --dataset=...), and jobs that reached the
// node some other way (job_submit off, audit mode, an admin's scontrol update).
//
// It runs in the remote context and fails the TASK (slurm_spank_task_init returns an
// error), never the prolog: a failing prolog drains the node for everyone.
#pragma once

#include <string>
#include <vector>

#include "saker/policy.hpp"

namespace saker::spank {

struct ResidencyVerdict {
  bool refuse = false;
  std::string message;  // the refusal, or an audit-mode "would deny" note, or ""
  bool encrypt_transit = false;  // a dataset's classification has transit: encrypt
};

// Who runs the step, from the job's node record (node_record.hpp), never the task env.
using LaunchIdentity = policy::Identity;

// Loads the policy (as root: in the job prolog, or in slurmstepd when the step declares
// more than the job or the policy changed) and checks zones and grants
// (Policy::check_launch_access: the access-only check, no routing).
// Fails closed: datasets with no loadable policy or an unknown node are refused. No
// datasets: never refused.
ResidencyVerdict check_residency(const std::string& policy_path, const std::string& node_name,
                                 const std::vector<policy::DatasetRef>& datasets, const LaunchIdentity& who);

// The same against a policy already loaded (unit tests).
ResidencyVerdict check_residency(const policy::Policy& p, const std::string& node_name,
                                 const std::vector<policy::DatasetRef>& datasets, const LaunchIdentity& who);

// Union of dataset lists (order kept, duplicates by name@version dropped). Every
// source can only add datasets, so a forged source can only make the check stricter.
void merge_datasets(std::vector<policy::DatasetRef>& into, const std::vector<policy::DatasetRef>& more);

}  // namespace saker::spank
