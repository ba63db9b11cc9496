// Helpers of the telemetry unit tests: a scratch directory (the ckpt tests' TempDir),
// files written in one call, and a fake /proc tree.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/unit/ckpt_test_util.hpp"

namespace saker::telemetry::testing {

using TempDir = saker::ckpt::testing::TempDir;

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A /proc/PID/stat line with the fields the parser reads (ticks).
inline std::string stat_line(int pid, const std::string& comm, int ppid, unsigned long ut, unsigned long st, long cut = 0,
                             long cst = 0) {
  return std::to_string(pid) + " (" + comm + ") S " + std::to_string(ppid) + " 1 1 0 -1 4194560 100 0 0 0 " +
         std::to_string(ut) + " " + std::to_string(st) + " " + std::to_string(cut) + " " + std::to_string(cst) +
         " 20 0 1 0 100 1000 100 18446744073709551615\n";
}

// Adds process `pid` to the fake /proc under `root`.
inline void fake_process(const std::filesystem::path& root, int pid, int ppid, unsigned long ut, unsigned long st,
                         unsigned long rss_kb, unsigned long hwm_kb, long cut = 0, long cst = 0, unsigned long rb = 0,
                         unsigned long wb = 0) {
  const auto dir = root / std::to_string(pid);
  write_file(dir / "stat", stat_line(pid, "proc " + std::to_string(pid), ppid, ut, st, cut, cst));
  write_file(dir / "status", "Name:\tx\nVmHWM:\t" + std::to_string(hwm_kb) + " kB\nVmRSS:\t" + std::to_string(rss_kb) + " kB\n");
  write_file(dir / "io", "rchar: 1\nwchar: 1\nread_bytes: " + std::to_string(rb) + "\nwrite_bytes: " + std::to_string(wb) +
                             "\ncancelled_write_bytes: 0\n");
  write_file(dir / "cgroup", "0::/user.slice\n");
}

}  // namespace saker::telemetry::testing
