// spank_saker.so's job attestation (issue 30): in slurmstepd, as root, when a step starts,
// sign what the site knows of the step with its Ed25519 key (attestation_step.hpp says
// where each fact comes from) and give the tasks the file's path as SAKER_ATTESTATION,
// where libsaker_ckpt picks it up for every checkpoint's provenance.
//
// Never fails a step: without a key, a record or a writable directory the tasks run
// unattested (their checkpoints say so) and slurmd's log names the cause and the fix.
#pragma once

extern "C" {
#include <slurm/spank.h>
}

#include "plugins/spank/attestation_step.hpp"
#include "plugins/spank/config.hpp"

namespace saker::spank {

// The step's ids as slurmstepd knows them (never the task's environment); also the
// OpenLineage events' (lineage_hook.hpp).
StepIds step_ids(spank_t sp);
// The audit log whose head a step's attestation and lineage events state.
std::string stated_audit_log(const Config& config, const std::string& node);

// Remote context, slurm_spank_init_post_opt: signs and writes the step's attestation.
void attest_step(spank_t sp, const Config& config);
// slurm_spank_task_init: exports SAKER_ATTESTATION to the task (overwriting the user's).
void attest_task_init(spank_t sp);
// Job epilog (slurmd, as root): removes the job's attestation files on this node.
void attest_forget_job(const Config& config);

}  // namespace saker::spank
