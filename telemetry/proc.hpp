// Parsers for the kernel's per-process and per-cgroup files that CPU telemetry reads.
// Each takes the file's text, so tests feed them malformed and truncated input by class;
// each returns nullopt (never throws) for text it cannot trust, because a process may
// exit between listing and reading, leaving an empty or partial file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace saker::telemetry {

// /proc/PID/stat: what the step's CPU time and process tree need.
struct ProcStat {
  pid_t ppid = 0;
  std::uint64_t utime = 0, stime = 0;    // clock ticks, this process
  std::uint64_t cutime = 0, cstime = 0;  // clock ticks, children it has waited for
};
// The command name (field 2) may hold spaces and ')': fields are counted after the last ')'.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// /proc/PID/status: resident set now and its high-water mark, in bytes.
struct ProcMemory {
  std::uint64_t rss = 0;
  std::uint64_t hwm = 0;
};
std::optional<ProcMemory> parse_proc_status(std::string_view text);

// /proc/PID/io: bytes this process made the storage layer read and write.
struct IoBytes {
  std::uint64_t read = 0;
  std::uint64_t write = 0;
};
std::optional<IoBytes> parse_proc_io(std::string_view text);

// The first whitespace-separated unsigned number of a one-value file
// (memory.max_usage_in_bytes, cpuacct.usage, memory.peak). "max" (no limit) is nullopt.
std::optional<std::uint64_t> parse_single_number(std::string_view text);
// "key value" lines (cgroup v2 cpu.stat, memory.stat): the value of key.
std::optional<std::uint64_t> parse_keyed_number(std::string_view text, std::string_view key);
// cgroup v2 io.stat ("MAJ:MIN rbytes=N wbytes=N ...") summed over devices.
std::optional<IoBytes> parse_io_stat_v2(std::string_view text);
// cgroup v1 blkio.throttle.io_service_bytes ("MAJ:MIN Read N" ... "Total N") summed.
std::optional<IoBytes> parse_blkio_v1(std::string_view text);

// /proc/PID/cgroup: the path of `controller` ("memory", "cpuacct"; "" for the v2
// unified line "0::/path").
std::optional<std::string> cgroup_path_of(std::string_view proc_cgroup, std::string_view controller);

// Reads a whole (small) file; nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path);

}  // namespace saker::telemetry
