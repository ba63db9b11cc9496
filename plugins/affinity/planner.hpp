// The per-rank affinity plan: for every local rank of a step, its own GPU, the cores
// near that GPU (shared fairly with the ranks on the same NUMA node, inside the
// task's allowed CPUs), memory on that NUMA node, the nearest NIC(s), and the
// environment that tells CUDA, NCCL, UCX and OpenMP about it (OpenMP's thread binding
// only when asked for: omp_bind.hpp).
//
// Pure function of (Machine, Request): no I/O, no hwloc, no clocks, so the plugin, the
// saker-topo CLI and the tests all get the same answer for the same inputs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugins/affinity/machine.hpp"
#include "plugins/affinity/omp_bind.hpp"
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
  OmpBind omp_bind = OmpBind::none;  // none: OMP_NUM_THREADS only; else also OMP_PLACES, OMP_PROC_BIND
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

// What to do to a task's environment: the plan's variables to set (overwriting), and
// the task's own values the plan leaves alone.
struct TaskEnv {
  std::vector<std::pair<std::string, std::string>> set;   // in the plan's order
  std::vector<std::pair<std::string, std::string>> kept;  // the task's values, in the plan's order
  std::vector<std::string> unset;                         // an enclosing step's plan's leftovers
};

// Where the plan records the OMP_* values it set (KEY=VALUE;...), so that a step started
// inside a bound task (srun inside `srun --pty bash`) can tell them from the user's.
inline constexpr const char* kPlanRecord = "SAKER_PLAN_OMP";

// The plan's environment for a task whose own variables `task_value` reads (nullopt:
// unset). The placement variables (CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, UCX_NET_DEVICES...)
// are the plan's decision and overwrite whatever Slurm or the user put there. The OpenMP
// ones (OMP_NUM_THREADS, OMP_PLACES, OMP_PROC_BIND) only advise the threads inside the
// task: a value the task already has, even empty, is the user's choice and wins, unless
// it is the value an enclosing step's plan recorded in kPlanRecord (inherited, not
// chosen). Such a plan's variables that this plan does not set are unset, again unless
// the user changed them. `set` ends with this plan's record.
TaskEnv task_env(const RankPlan& rank,
                 const std::function<std::optional<std::string>(const std::string&)>& task_value);

// Throws saker::Error with the reason and the fix for impossible requests: more
// ranks than GPUs in exclusive mode, a GPU the topology does not have, or a NUMA
// domain whose cores are all outside the allowed CPUs.
Plan make_plan(const Machine& machine, const Request& request);

}  // namespace saker::affinity
