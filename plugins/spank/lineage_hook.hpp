// spank_saker.so's OpenLineage events (issue 30 §3; provenance/openlineage.hpp): with
// openlineage-dir= in plugstack.conf, each step writes, on each of its nodes, a START
// event when it starts and a COMPLETE or FAIL event when it ends, into that directory.
//
// Never fails or holds up a step beyond a bound: a directory that cannot be written, or a
// job without a node record, is named in slurmd's log and the step runs without events;
// the end event's checkpoint listing (openlineage_outputs.hpp) waits at most kListMs.
//
// The checkpoints' SHA-256: only the step's first node (node id 0) reads them (the
// directory is usually shared: one read of each file, not one per node), at most
// kHashBytes in all and until kHashMs after the listing started; the listing reaches
// slurmstepd before the reading, so a hung read costs the digests, not the outputs.
// At sha256sum's ~500 MB/s here, a checkpoint up to several hundred MB gets its digest.
#pragma once

extern "C" {
#include <slurm/spank.h>
}

#include <cstdint>

#include "plugins/spank/config.hpp"

namespace saker::spank {

inline constexpr int kListMs = 2000;
inline constexpr int kHashMs = 1500;  // below kListMs: the digests arrive before slurmstepd stops waiting
inline constexpr std::uint64_t kHashBytes = std::uint64_t{1} << 30;

// Remote context, slurm_spank_init_post_opt: the START event.
void lineage_step_start(spank_t sp, const Config& config);
// slurm_spank_task_exit: counts this node's tasks and their failures.
void lineage_task_exit(spank_t sp);
// slurm_spank_exit, remote context: the COMPLETE event, or FAIL when a task of this node failed.
void lineage_step_end();

}  // namespace saker::spank
