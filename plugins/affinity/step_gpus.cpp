#include "plugins/affinity/step_gpus.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "plugins/affinity/cpu_list.hpp"

namespace saker::affinity {
namespace {

bool given(const char* s) { return s != nullptr && *s != '\0'; }

// Under ConstrainDevices every visible number is a position among the step's GPUs.
bool all_positions(const std::vector<unsigned>& visible, std::size_t count) {
  return std::all_of(visible.begin(), visible.end(), [&](unsigned v) { return v < count; });
}

}  // namespace

StepGpus step_gpus_from_list(const std::string& list) {
  StepGpus out;
  out.physical = parse_index_list(list, "GPU list");
  for (unsigned g : out.physical) out.tokens.push_back(std::to_string(g));
  return out;
}

StepGpus step_gpus_from_env(const char* slurm_step_gpus, const char* cuda_visible_devices, Renumbering renumbering) {
  if (!given(slurm_step_gpus)) {
    if (!given(cuda_visible_devices)) return {};
    // Without SLURM_STEP_GPUS (a batch step, or GPUs handed out by other means) the
    // visible list is all we know; its numbers are taken as node indexes.
    try {
      return step_gpus_from_list(cuda_visible_devices);
    } catch (const Error&) {
      throw Error(explain("CUDA_VISIBLE_DEVICES='" + std::string(cuda_visible_devices) + "' is not a list of indexes",
                          "Saker maps GPUs to the topology by index (UUIDs and MIG names are not supported)",
                          "let Slurm set CUDA_VISIBLE_DEVICES, or run with --gpu-affinity=none"));
    }
  }
  StepGpus out;
  out.physical = parse_index_list(slurm_step_gpus, "SLURM_STEP_GPUS");
  bool renumbered = renumbering == Renumbering::yes;
  if (renumbering == Renumbering::detect && given(cuda_visible_devices)) {
    try {
      const auto visible = parse_index_list(cuda_visible_devices, "CUDA_VISIBLE_DEVICES");
      const bool foreign = std::any_of(visible.begin(), visible.end(), [&](unsigned v) {
        return !std::binary_search(out.physical.begin(), out.physical.end(), v);
      });
      // Only renumbering (0..n-1 under ConstrainDevices) can name an index outside the step.
      renumbered = foreign && all_positions(visible, out.physical.size());
    } catch (const Error&) {
      renumbered = false;  // non-numeric CUDA_VISIBLE_DEVICES: we rewrite it from SLURM_STEP_GPUS
    }
  }
  for (std::size_t i = 0; i < out.physical.size(); ++i)
    out.tokens.push_back(std::to_string(renumbered ? static_cast<unsigned>(i) : out.physical[i]));
  return out;
}

}  // namespace saker::affinity
