// spank_saker.so's glue for the launch-time residency re-check (residency.hpp).
#pragma once

#include <string>
#include <vector>

extern "C" {
#include <slurm/spank.h>
}

#include "policies/dataset_ref.hpp"

namespace saker::spank {

// Remote context, slurm_spank_init_post_opt (slurmstepd, as root): gathers the node
// name and the job's datasets from sources Slurm controls, and decides.
void residency_prepare(spank_t sp, const std::string& policy_path, const std::vector<policy::DatasetRef>& option_value);

// slurm_spank_task_init: fails the task with the message when the decision was a refusal.
int residency_enforce(spank_t sp);

}  // namespace saker::spank
