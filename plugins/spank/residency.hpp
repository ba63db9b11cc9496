// Launch-time residency re-check (defence in depth): before a task of a job that
// declared datasets starts, check this node's zone in the site policy against the
// datasets' allowed zones. It catches a policy changed after submission, a node moved
// between partitions, and jobs that reached the node some other way (job_submit off,
// audit mode, an admin's scontrol update).
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
};

// Loads the policy (once per step, as root in slurmstepd) and checks. Fails closed: a
// job that declared datasets is refused when the policy cannot be loaded or the node
// name is unknown. A job without datasets is never refused.
ResidencyVerdict check_residency(const std::string& policy_path, const std::string& node_name,
                                 const std::vector<policy::DatasetRef>& datasets);

// Union of dataset lists (order kept, duplicates by name@version dropped). Every
// source can only add datasets, so a forged source can only make the check stricter.
void merge_datasets(std::vector<policy::DatasetRef>& into, const std::vector<policy::DatasetRef>& more);

}  // namespace saker::spank
