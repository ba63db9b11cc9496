// What job_submit_saker.so keeps between callbacks: the current compiled policy, the
// audit log and the datasets of accepted jobs (for job_modify).
//
// Threads: one background thread, started in init() and joined in fini(), so it never
// outlives the plugin (the point of the "no threads that outlive a callback" rule:
// slurmctld unloads the .so after fini; a thread still running its code would crash
// the controller). The issue requires file I/O and fsync to stay off the hot path, and
// a callback runs under slurmctld's job write lock, where an fsync (milliseconds, or
// seconds on a loaded disk) or a YAML parse of a large policy would stall every RPC.
// So callbacks only read a shared_ptr and push a string into a queue; the thread does
// the stat() of the policy file, reloads it, writes the audit log (one write + one
// fdatasync per batch) and learns job ids of jobs that declared datasets.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "plugins/job_submit/config.hpp"
#include "policies/audit_log.hpp"
#include "saker/policy.hpp"

namespace saker::job_submit {

class Service {
 public:
  // Reads the configuration and loads the policy synchronously (slurmctld startup), then
  // starts the background thread.
  Service();
  ~Service();  // stops and joins the thread, flushes the audit log

  // The policy to decide with, or null with the reason in `why`.
  policy::PolicyPtr policy(std::string& why) const;
  void record(const policy::audit::Entry& entry);

  // job_modify support: the datasets of an existing job. Returns false when the answer
  // is not known yet (a job submitted in the last moments, before it was indexed).
  bool datasets_of(std::uint32_t job_id, std::vector<policy::DatasetRef>& out) const;
  void submitted_with_datasets();

 private:
  void run();
  void wake();
  void poll_policy();
  void index_jobs();
  bool index_all();
  bool index_next(std::uint32_t job_id, bool& exists);

  Config config_;
  std::vector<std::string> config_errors_;
  mutable std::mutex mutex_;
  policy::PolicyPtr policy_;
  std::string why_none_;
  std::unique_ptr<policy::audit::Log> audit_;
  struct FileId { long long mtime_ns = 0, size = -1, inode = 0; bool operator==(const FileId&) const = default; };
  FileId loaded_;
  std::unordered_map<std::uint32_t, std::vector<policy::DatasetRef>> job_datasets_;
  // Times of accepted submissions with datasets whose job is not indexed yet; one is
  // retired per newly indexed job, and after 10 s (slurmctld refused the job after us).
  std::deque<std::chrono::steady_clock::time_point> unindexed_;
  std::atomic<bool> indexed_once_{false};
  std::uint32_t max_job_id_ = 0;  // highest job id seen by the indexer (its thread only)
  std::condition_variable cv_;
  std::mutex wake_mutex_;
  bool stop_ = false;
  std::thread thread_;
};

// The marker job_submit appends to a job's comment so that the datasets survive a
// slurmctld restart and can be read back through slurm_load_jobs().
inline constexpr const char* kCommentMarker = "saker-datasets=";
inline std::string kDatasetsEnvPrefix() { return std::string(policy::kDatasetsEnvName) + "="; }

}  // namespace saker::job_submit
