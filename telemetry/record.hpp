// The per-job telemetry record (saker-telemetry(5)): what one node saw of one step,
// summarised at step end, appended to DIR/JOBID.telemetry by every node and step of the
// job ("merged by job id"), read back by saker-stats.
//
// Text, one fact per line, so an operator can read it with less and grep it:
//   step job=42 step=0 node=n7 user=alice account=ml start=... end=... ...
//   cpu efficiency=0.497 cpu_seconds=... util_mean=... rss_hwm=... ...
//   gpu index=3 util_mean=8.0 idle_fraction=0.92 ...
//   rank rank=5 share=0.40 allreduce_s=... bytes=... ...
//   series what=cpu t0=... dt=10 values=49.8,50.1,...
//   end
// A block is only trusted with its closing `end` (a node that died mid-write leaves a
// block without one, which the reader skips and reports).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace saker::telemetry {

struct Stats {
  std::size_t n = 0;
  double min = 0, mean = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
};
// Nearest-rank percentiles; an empty input gives n = 0 and zeros.
Stats summarize(std::vector<double> values);

struct StepInfo {
  std::string job, step, node, user, account;
  std::uint32_t uid = 0;
  double start = 0, end = 0;  // seconds since the epoch
  double interval = 0;        // sampling interval, seconds
  std::uint32_t samples = 0, tasks = 0, cpus = 0;
  std::string source;         // "proc", "cgroup-v1", "cgroup-v2"
  double sampler_core_share = 0;  // the sampler's own CPU time / step wall time
  double final_write_ms = 0;      // last sample + summary + writes, at step end
  // What ended the sampling: "step-end" (slurmstepd's signal when the step's last task
  // exited, so the record is written while the step's end waits for it), "signal" (any
  // other SIGTERM/SIGINT/SIGHUP), "stepd-gone" (slurmstepd exited without one), "error".
  std::string stopped_by;
  std::string gpu_note;           // why there are no GPU figures, when a GPU was expected
  std::string note;               // the sampler's own problems (a Prometheus file it could not write)
};

struct CpuSummary {
  double cpu_seconds = 0;
  double efficiency = 0;  // cpu_seconds / (wall * allocated cpus)
  Stats util;             // percent of the allocated CPUs, per sampling interval
  std::uint64_t rss_hwm = 0, mem_limit = 0;
  std::uint64_t read_bytes = 0, write_bytes = 0;
};

struct GpuSummary {
  unsigned index = 0;
  bool present = true;
  Stats util;                 // percent
  double idle_fraction = 0;   // share of samples with utilisation 0
  std::uint64_t mem_used_max = 0, mem_total = 0;
  double energy_j = 0, power_max_w = 0, temperature_max_c = 0, sm_clock_mean_mhz = 0;
  double throttled_fraction = 0;     // share of samples slowed by power or heat
  std::uint64_t throttle_reasons = 0;  // every reason seen (OR)
  std::uint64_t ecc_uncorrected = 0;
  std::uint64_t xid_errors = 0, last_xid = 0;  // XID critical errors during the step, the last code
  unsigned errors = 0;
  std::string last_error;
};

struct RankSummary {
  int rank = 0;
  std::uint64_t calls = 0, bytes = 0, stalls = 0;
  double allreduce_s = 0, lifetime_s = 0;
  double share = 0;  // allreduce_s / lifetime_s
};

struct Series {
  std::string what;  // "cpu", "gpu3"
  double t0 = 0, dt = 0;
  std::vector<double> values;  // percent
};

struct NodeStepRecord {
  StepInfo info;
  CpuSummary cpu;
  std::vector<GpuSummary> gpus;
  std::vector<RankSummary> ranks;
  std::vector<Series> series;
};

// The block for one node and step, ending with "end\n".
std::string format_record(const NodeStepRecord& r);

struct ParseResult {
  std::vector<NodeStepRecord> records;  // in file order
  std::vector<std::string> problems;    // "line 12: ..." for each block skipped
};
// Never throws: a bad block is skipped and named in problems.
ParseResult parse_records(std::string_view text);

// Keeps, for each (step, node), the block of the latest start (a requeued job runs its
// steps again under the same id); sorted by step then node.
std::vector<NodeStepRecord> latest_per_step_and_node(std::vector<NodeStepRecord> records);

// Values in the record are tokens: [A-Za-z0-9._@+:-] as is, any other byte as %XX.
std::string encode_token(std::string_view s);
std::string decode_token(std::string_view s);

// DIR/JOBID.telemetry. Throws saker::Error when the job id is not a Slurm job id
// (digits, optionally _N or +N) - it becomes a file name.
std::string record_path(const std::string& dir, const std::string& job);

}  // namespace saker::telemetry
