// CPU time, memory and I/O of one job step on this node.
//
// Two sources, chosen once per step:
//  - the step's cgroup (cgroup v1 or v2, with proctrack/cgroup or task/cgroup): the
//    kernel's own totals, including processes that already exited;
//  - otherwise (proctrack/linuxproc, as on Saker's local cluster) the process tree under
//    slurmstepd: live descendants plus what slurmstepd accumulated from the tasks it
//    has reaped (cutime/cstime, and the reaped children's I/O in its /proc/PID/io).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "telemetry/proc.hpp"

namespace saker::telemetry {

struct StepUsage {
  double cpu_seconds = 0;         // cumulative since the step started
  std::uint64_t rss = 0;          // resident memory now, bytes
  std::uint64_t rss_hwm = 0;      // the largest resident size the source knows of
  std::uint64_t mem_limit = 0;    // 0: no limit known
  IoBytes io;                     // cumulative
  unsigned processes = 0;         // live processes seen (process-tree source)
};

class StepSource {
 public:
  // The step run by slurmstepd `stepd`. Roots are parameters so tests can point them at
  // fixture trees.
  StepSource(pid_t stepd, std::string proc_root = "/proc", std::string cgroup_root = "/sys/fs/cgroup");

  // "cgroup-v2", "cgroup-v1" or "proc".
  const std::string& kind() const { return kind_; }
  // nullopt: nothing could be read (slurmstepd is gone and no cgroup is left).
  std::optional<StepUsage> read() const;

 private:
  std::optional<StepUsage> read_proc() const;
  std::optional<std::map<pid_t, ProcStat>> step_processes() const;
  std::optional<StepUsage> read_cgroup() const;
  pid_t stepd_;
  std::string proc_root_;
  std::string cgroup_root_;
  std::string kind_ = "proc";
  std::string cpu_dir_, mem_dir_, io_dir_;  // cgroup directories (v2: all the same)
  long ticks_per_second_;
};

// "/a/job_1/step_0/slurm" -> "/a/job_1/step_0": the path up to its step_* component
// (nullopt: the path is not a Slurm step's cgroup).
std::optional<std::string> slurm_step_cgroup(std::string_view path);

}  // namespace saker::telemetry
