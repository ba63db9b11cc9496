// spank_saker.so's glue for the launch-time residency re-check (residency.hpp).
#pragma once

#include <string>
#include <vector>

extern "C" {
#include <slurm/spank.h>
}

#include "plugins/spank/config.hpp"
#include "policies/dataset_ref.hpp"

namespace saker::spank {

// Job prolog / epilog (slurmd, as root, S_CTX_JOB_SCRIPT): write / remove the node's
// record of the job (node_record.hpp). Always 0: a failing prolog drains the node.
int residency_record_job(const Config& config);
int residency_forget_job(const Config& config);

// Remote context, slurm_spank_init_post_opt (slurmstepd, as root): gathers the node
// name, the job's record and what the step declares, decides, audits refusals and
// step-level declarations (launch_audit.hpp).
void residency_prepare(spank_t sp, const Config& config, const std::vector<policy::DatasetRef>& option_value);

// slurm_spank_task_init: fails the task with the message when the decision was a refusal.
int residency_enforce(spank_t sp);

}  // namespace saker::spank
