// spank_saker.so, remote context: GPU/CPU/memory/NIC affinity of each task.
//
// Once per step (slurmstepd, as root, after options are known) the node's topology is
// loaded: from topology=FILE, or from the XML cache in slurmd's spool, discovering and
// writing it the first time. In each task, just before exec, the planner decides the
// task's GPU, cores, NUMA node and NICs, and this file applies that: environment,
// sched_setaffinity, set_mempolicy. Every function returns a SPANK status and never
// throws (callers wrap them in saker::plugin::guarded anyway).
#pragma once

extern "C" {
#include <slurm/spank.h>
}

#include "plugins/spank/config.hpp"

namespace saker::spank {

// All contexts (slurm_spank_init): registers --gpu-affinity=auto|none|explain and
// --omp-bind=none|close|spread.
int affinity_register_option(spank_t sp);
// Remote context (slurm_spank_init_post_opt): loads the topology for this step.
int affinity_prepare_step(spank_t sp, const Config& config);
// Remote context (slurm_spank_task_init): plans and applies this task's affinity. A
// failure leaves the task unbound with a warning, or fails it under `strict`.
int affinity_task_init(spank_t sp, const Config& config);

}  // namespace saker::spank
