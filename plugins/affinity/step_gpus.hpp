// Which GPUs a job step was given, from the environment Slurm sets for the task.
//
// SLURM_STEP_GPUS holds the node's GPU indexes (gres.conf order = PCI order), and is
// the ground truth. CUDA_VISIBLE_DEVICES holds what CUDA must be told: the same
// indexes, or, under ConstrainDevices=yes (the cgroup hides the other GPUs), the
// positions 0..n-1 among the step's GPUs. Both are kept so the plan can name GPUs by
// topology and still hand CUDA the numbers it understands.
#pragma once

#include <string>
#include <vector>

namespace saker::affinity {

struct StepGpus {
  std::vector<unsigned> physical;   // node GPU indexes, ascending
  std::vector<std::string> tokens;  // the CUDA_VISIBLE_DEVICES value for each, same order
};

enum class Renumbering {
  detect,  // renumbered if CUDA_VISIBLE_DEVICES names an index the step does not hold
  yes,     // ConstrainDevices=yes: CUDA numbers the step's GPUs 0..n-1
  no,
};

// Either argument may be null or empty. Throws saker::Error (naming the variable) when a
// list is not numeric, e.g. CUDA_VISIBLE_DEVICES=GPU-<uuid>.
StepGpus step_gpus_from_env(const char* slurm_step_gpus, const char* cuda_visible_devices,
                            Renumbering renumbering = Renumbering::detect);

// For `saker-topo plan --gpus LIST`: node indexes, not renumbered.
StepGpus step_gpus_from_list(const std::string& list);

}  // namespace saker::affinity
