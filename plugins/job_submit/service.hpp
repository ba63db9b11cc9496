// What job_submit_saker.so keeps between callbacks: the current compiled policy, the
// audit log and the index of jobs' datasets (for job_modify, see job_index.hpp).
//
// Threads: one background thread, started in init() and joined in fini(), so it never
// outlives the plugin (slurmctld unloads the .so after fini; a thread still running its
// code would crash the controller). The issue requires file I/O and fsync to stay off
// the hot path, and a callback runs under slurmctld's locks, where an fsync (milliseconds,
// or seconds on a loaded disk) or a YAML parse of a large policy would stall every RPC.
// So callbacks only read a shared_ptr and push a string into a queue; the thread does
// the stat() of the policy file, reloads it, writes the audit log and sweeps the index.
//
// Batching: the thread's work per submission (an fdatasync, index RPCs that cost slurmctld
// and munged as much as the submission itself) would otherwise compete with the
// submissions for the CPU and the disk. So after each round of work the thread waits
// kAuditWindow before the next audit write + fdatasync and kSweepWindow before the next
// index sweep; records and submissions arriving meanwhile share them. A lone submission
// after a quiet period is still written and indexed at once: the thread only sleeps
// "idle" when nothing is pending, and only then does a callback wake it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plugins/job_submit/config.hpp"
#include "plugins/job_submit/job_index.hpp"
#include "policies/audit_log.hpp"
#include "saker/policy.hpp"

namespace saker::job_submit {

class Service {
 public:
  // Reads the configuration and loads the policy synchronously (slurmctld startup), then
  // starts the background thread.
  Service();
  ~Service();  // stops and joins the thread, then writes and syncs every queued record

  // At most this long between an audit record and its fdatasync while records keep
  // coming (group commit); a clean shutdown loses none (the destructor flushes).
  static constexpr std::chrono::milliseconds kAuditWindow{50};
  static constexpr std::chrono::milliseconds kAuditRetry{1000};  // after a failed write
  // At most this long between index sweeps while submissions keep coming.
  static constexpr std::chrono::milliseconds kSweepWindow{500};

  // The policy to decide with, or null with the reason in `why`.
  policy::PolicyPtr policy(std::string& why) const;
  void record(const policy::audit::Entry& entry);

  // job_modify support: what the index knows of an existing job (see JobIndex::lookup).
  JobFacts facts_of(const plugins::JobRef& ref);
  void submitted_with_datasets();

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  void nudge();
  void poll_policy();
  bool flush_audit();  // false (and logged) when the log could not be written

  Config config_;
  std::vector<std::string> config_errors_;
  mutable std::mutex mutex_;
  policy::PolicyPtr policy_;
  std::string why_none_;
  std::unique_ptr<policy::audit::Log> audit_;
  struct FileId { long long mtime_ns = 0, size = -1, inode = 0; bool operator==(const FileId&) const = default; };
  FileId loaded_;
  std::unique_ptr<JobSource> job_source_;
  std::unique_ptr<JobIndex> index_;
  std::condition_variable cv_;
  std::mutex wake_mutex_;
  bool stop_ = false;
  bool idle_ = false;  // the thread sleeps with nothing pending: a callback may wake it
  std::thread thread_;
};


}  // namespace saker::job_submit
