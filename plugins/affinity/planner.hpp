// The per-rank affinity plan: for every local rank of a step, its own GPU, the cores
// near that GPU (shared fairly with the ranks on the same NUMA node, inside the
// task's allowed CPUs), memory on that NUMA node, the nearest NIC(s), and the
// environment that tells CUDA, NCCL, UCX and OpenMP about it.
//
// Pure function of (Machine, Request): no I/O, no hwloc, no clocks, so the plugin, the
// saker-topo CLI and the tests all get the same answer for the same inputs.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugins/affinity/machine.hpp"
#include "plugins/affinity/step_gpus.hpp"

namespace saker::affinity {

enum class GpuSharing {
  exclusive,  // one GPU per rank; more ranks than GPUs is an error
  shared,     // ranks share GPUs in blocks when there are fewer GPUs than ranks
};

struct Request {
  StepGpus gpus;                     // may be empty (CPU-only step)
  std::optional<IndexList> allowed;  // PUs the tasks may use; nullopt = the whole machine
  unsigned local_tasks = 1;
  GpuSharing sharing = GpuSharing::exclusive;
};

struct RankPlan {
  unsigned rank = 0;                // local rank (SLURM_LOCALID)
  std::optional<unsigned> gpu;      // node GPU index
  std::size_t numa = 0;             // position in Machine::numas (memory binding)
  std::vector<std::size_t> cores;   // positions in Machine::cores
  IndexList pus;                    // the CPU affinity
  bool cores_shared = false;        // fewer cores than ranks on this NUMA node
  std::vector<std::size_t> nics;    // positions in Machine::nics, nearest first
  std::vector<std::pair<std::string, std::string>> env;  // in a fixed order
};

struct Plan {
  std::vector<RankPlan> ranks;  // one per local rank, in rank order
};

// Throws saker::Error with the reason and the fix for impossible requests: more
// ranks than GPUs in exclusive mode, a GPU the topology does not have, or a NUMA
// domain whose cores are all outside the allowed CPUs.
Plan make_plan(const Machine& machine, const Request& request);

}  // namespace saker::affinity
