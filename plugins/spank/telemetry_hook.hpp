// spank_saker.so's telemetry (telemetry= in plugstack.conf): one sampler process per
// step and node, saker-sample-step, started from slurmstepd and stopped when the step's
// last task on the node exits.
//
// Why a separate process: code in slurmstepd may not keep threads past a callback and
// must never take the daemon down; a sampler that is fork/exec'd (twice, so slurmstepd
// never reaps it and proctrack/linuxproc does not count it among the step's processes)
// can block, crash or be slow without touching the step.
#pragma once

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include "plugins/spank/config.hpp"

namespace saker::spank {

// slurm_spank_init_post_opt, remote context (root): creates the ranks' counters
// directory and starts the sampler. Always 0: telemetry never fails a step.
int telemetry_start(spank_t sp, const Config& config);
// slurm_spank_task_init: SAKER_TELEMETRY_DIR for the collective library's counters.
int telemetry_task_init(spank_t sp);
// slurm_spank_task_exit: after the node's last task, stops the sampler and waits (a few
// ms, bounded) for its record, before proctrack kills what is left of the step.
int telemetry_task_exit(spank_t sp);
// slurm_spank_exit: the backstop when task_exit never saw the last task.
int telemetry_exit(spank_t sp);

}  // namespace saker::spank
