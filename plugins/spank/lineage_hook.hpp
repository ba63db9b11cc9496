// spank_saker.so's OpenLineage events (issue 30 §3; provenance/openlineage.hpp): with
// openlineage-dir= in plugstack.conf, each step writes, on each of its nodes, a START
// event when it starts and a COMPLETE or FAIL event when it ends, into that directory.
//
// Never fails or holds up a step beyond a bound: a directory that cannot be written, or a
// job without a node record, is named in slurmd's log and the step runs without events;
// the end event's checkpoint listing (openlineage_outputs.hpp) waits at most kListMs.
#pragma once

extern "C" {
#include <slurm/spank.h>
}

#include "plugins/spank/config.hpp"

namespace saker::spank {

inline constexpr int kListMs = 2000;

// Remote context, slurm_spank_init_post_opt: the START event.
void lineage_step_start(spank_t sp, const Config& config);
// slurm_spank_task_exit: counts this node's tasks and their failures.
void lineage_task_exit(spank_t sp);
// slurm_spank_exit, remote context: the COMPLETE event, or FAIL when a task of this node failed.
void lineage_step_end();

}  // namespace saker::spank
