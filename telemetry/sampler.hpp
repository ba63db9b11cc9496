// One step on one node, sampled: CPU/memory/I-O (step_source.hpp), the step's GPUs
// (nvml.hpp) and the ranks' collective counters (comm_counters.hpp), folded into the
// node's record (record.hpp) at the end. saker-sample-step drives it on a timer.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/comm_counters.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/record.hpp"
#include "telemetry/step_source.hpp"

namespace saker::telemetry {

struct SamplerConfig {
  StepInfo info;                 // job, step, node, user, uid, account, tasks, cpus, interval
  pid_t stepd = 0;               // the step's slurmstepd
  std::vector<unsigned> gpus;    // the node GPU indexes the step holds
  std::string counters_dir;      // where ranks publish comm.RANK (empty: none)
  std::uint64_t mem_limit = 0;   // the step's allocation, bytes, when no cgroup says it
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string proc_root = "/proc", cgroup_root = "/sys/fs/cgroup";
};

class StepSampler {
 public:
  explicit StepSampler(SamplerConfig config);

  // One sample at `now` (seconds since the epoch).
  void sample(double now);
  // The record so far; `now` closes the step's wall time.
  NodeStepRecord summary(double now) const;
  const std::string& source_kind() const { return source_.kind(); }
  // The largest resident size of a process of the step that has exited (slurmstepd's
  // RUSAGE_CHILDREN, which the plugin sends with the stop signal).
  void note_exited_max_rss(std::uint64_t bytes) { rss_hwm_ = std::max(rss_hwm_, bytes); }

 private:
  struct GpuTrack {
    std::vector<double> util;
    unsigned idle = 0, throttled = 0, samples = 0, present_samples = 0;
    std::uint64_t mem_used_max = 0, mem_total = 0, reasons = 0;
    std::optional<std::uint64_t> energy_first, energy_last, ecc_first, ecc_last;
    double energy_from_power_j = 0, power_max = 0, temp_max = 0, clock_sum = 0;
    unsigned clock_n = 0, errors = 0;
    std::uint64_t xids = 0, last_xid = 0;
    std::string last_error;
    double last_t = 0;
  };
  SamplerConfig config_;
  StepSource source_;
  std::unique_ptr<Nvml> nvml_;
  std::string gpu_note_;
  double start_ = 0, last_t_ = 0;
  double last_cpu_ = 0;
  std::optional<StepUsage> last_usage_;
  std::uint64_t rss_hwm_ = 0;
  std::vector<double> cpu_util_;
  std::map<unsigned, GpuTrack> gpus_;
  std::map<int, CommCounters> ranks_;
  unsigned samples_ = 0;
};

}  // namespace saker::telemetry
