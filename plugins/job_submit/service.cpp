#include "plugins/job_submit/service.hpp"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/log.hpp"
#include "policies/audit_head.hpp"

extern "C" {
#include <slurm/slurm.h>
}

namespace saker::job_submit {

namespace {

bool file_id(const std::string& path, long long& mtime_ns, long long& size, long long& inode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  size = static_cast<long long>(st.st_size);
  inode = static_cast<long long>(st.st_ino);
  return true;
}

std::optional<std::vector<policy::DatasetRef>> marked_datasets(const slurm_job_info_t& job) {
  if (job.comment == nullptr) return std::nullopt;
  const char* at = std::strstr(job.comment, kCommentMarker);
  if (at == nullptr) return std::nullopt;
  std::string list = at + std::strlen(kCommentMarker);
  list = list.substr(0, list.find(' '));
  try {
    return policy::parse_dataset_list(list);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void collect(const job_info_msg_t& msg, std::vector<IndexedJob>& out) {
  for (std::uint32_t i = 0; i < msg.record_count; ++i) {
    const slurm_job_info_t& job = msg.job_array[i];
    // A split-off array task has an id of its own; the array's record keeps array_job_id.
    const bool array_task = job.array_job_id != 0 && job.array_job_id != job.job_id;
    out.push_back({job.job_id, array_task, marked_datasets(job)});
  }
}

// The index's view of slurmctld: RPCs from the service's thread, which holds none of
// slurmctld's locks, so they are served like any client's. SHOW_LOCAL: without it
// libslurm first asks slurmctld for the federation, one more RPC per load.
class SlurmJobSource final : public JobSource {
 public:
  Found load_one(std::uint32_t id, std::vector<IndexedJob>& out) override {
    job_info_msg_t* msg = nullptr;
    if (slurm_load_job(&msg, id, SHOW_ALL | SHOW_LOCAL) != SLURM_SUCCESS || msg == nullptr)
      return slurm_get_errno() == ESLURM_INVALID_JOB_ID ? Found::no : Found::error;
    collect(*msg, out);
    const bool any = msg->record_count > 0;
    slurm_free_job_info_msg(msg);
    return any ? Found::yes : Found::no;
  }
  bool load_all(std::vector<IndexedJob>& out) override {
    job_info_msg_t* msg = nullptr;
    if (slurm_load_jobs(0, &msg, SHOW_ALL | SHOW_LOCAL) != SLURM_SUCCESS || msg == nullptr) return false;
    collect(*msg, out);
    slurm_free_job_info_msg(msg);
    return true;
  }
};

}  // namespace

Service::Service() {
  const std::string path = config_path(std::getenv("SLURM_CONF"));
  std::ifstream in(path);
  if (!in) {
    config_errors_.push_back(path + ": cannot read (write policy=/path/to/policy.yaml there)");
    config_.audit = default_audit_path(path);
  } else {
    std::ostringstream text;
    text << in.rdbuf();
    config_ = parse_config(text.str(), path, config_errors_);
  }
  for (const auto& e : config_errors_) saker::log::error("job_submit/saker: " + e);
  if (!config_errors_.empty()) {
    why_none_ = "job_submit_saker.conf is invalid (" + config_errors_.front() + ")";
  } else {
    poll_policy();
  }
  std::string key;
  if (!config_.audit_key.empty()) {
    // Availability fails safe: without its key the log is still written, with an unkeyed
    // head, which `saker-policy audit verify --key` then reports.
    try {
      key = policy::audit::read_key_file(config_.audit_key);
    } catch (const std::exception& e) {
      saker::log::error(std::string("job_submit/saker: ") + e.what() + "; sealing the audit log without a MAC");
    }
  }
  audit_ = std::make_unique<policy::audit::Log>(config_.audit, key);
  job_source_ = std::make_unique<SlurmJobSource>();
  index_ = std::make_unique<JobIndex>(*job_source_);
  thread_ = std::thread([this] { run(); });
}

Service::~Service() {
  {
    const std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  flush_audit();
}

void Service::nudge() {
  const std::lock_guard<std::mutex> lock(wake_mutex_);
  if (!idle_) return;  // the thread is due to run anyway: no wake-up per callback in a burst
  idle_ = false;
  cv_.notify_one();
}

bool Service::flush_audit() {
  const std::string problem = audit_->flush();
  if (problem.empty()) return true;
  saker::log::error("job_submit/saker: " + problem);
  return false;
}

policy::PolicyPtr Service::policy(std::string& why) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!policy_) why = why_none_;
  return policy_;
}

void Service::record(const policy::audit::Entry& entry) {
  if (!audit_->enqueue(policy::audit::fields_json(entry)))
    saker::log::error("job_submit/saker: audit queue full; a record was dropped (a gap record will say how many)");
  nudge();
}

bool Service::datasets_of(std::uint32_t job_id, std::vector<policy::DatasetRef>& out) const {
  return index_->lookup(job_id, out);
}

void Service::submitted_with_datasets() {
  index_->expect_job();
  nudge();
}

void Service::poll_policy() {
  if (config_.policy.empty()) return;
  FileId now;
  if (!file_id(config_.policy, now.mtime_ns, now.size, now.inode)) {
    if (loaded_.size != -2) {
      const std::lock_guard<std::mutex> lock(mutex_);
      const std::string why = "policy file " + config_.policy + " cannot be read";
      if (!policy_) why_none_ = why;
      saker::log::error("job_submit/saker: " + why + (policy_ ? "; keeping the last good policy revision " + policy_->revision() : std::string()));
    }
    loaded_.size = -2;
    return;
  }
  if (now == loaded_) return;
  loaded_ = now;
  try {
    policy::LoadLimits limits;
    limits.max_bytes = config_.max_policy_bytes;
    auto fresh = policy::Policy::load_file(config_.policy, limits);
    const std::lock_guard<std::mutex> lock(mutex_);
    policy_ = fresh;
    saker::log::info("job_submit/saker: policy " + config_.policy + " loaded, revision " + fresh->revision());
  } catch (const std::exception& e) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!policy_) why_none_ = std::string("the policy does not load: ") + e.what();
    saker::log::error(std::string("job_submit/saker: new policy rejected: ") + e.what() +
                      (policy_ ? "; keeping the last good policy revision " + policy_->revision()
                               : std::string("; no policy is loaded: jobs that declare datasets are refused")));
  }
}

void Service::run() {
  pthread_setname_np(pthread_self(), "saker-jobsubmit");  // in top -H, gdb
  const auto reload_interval = std::chrono::milliseconds(config_.reload_interval_ms);
  auto next_stat = Clock::now() + reload_interval;  // the constructor loaded the policy
  auto next_flush = Clock::now();
  auto next_sweep = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      if (stop_) return;
      // Decided under wake_mutex_: a callback that queues work after this check finds
      // idle_ set and wakes the thread, so nothing waits for the next policy poll.
      const bool audit_pending = audit_->queued() > 0;
      const bool index_pending = index_->due();
      auto until = next_stat;
      if (audit_pending) until = std::min(until, next_flush);
      if (index_pending) until = std::min(until, next_sweep);
      idle_ = !audit_pending && !index_pending;
      if (idle_)
        cv_.wait_until(lock, until, [this] { return stop_ || !idle_; });
      else
        cv_.wait_until(lock, until, [this] { return stop_; });
      idle_ = false;
      if (stop_) return;
    }
    try {
      const auto now = Clock::now();
      if (now >= next_flush && audit_->queued() > 0) {
        // A log that cannot be written keeps its records queued: retry, but not 20 times a
        // second (each failure is logged).
        next_flush = Clock::now() + (flush_audit() ? kAuditWindow : kAuditRetry);
      }
      if (now >= next_stat) {
        poll_policy();
        next_stat = Clock::now() + reload_interval;
      }
      if (now >= next_sweep && index_->due()) {
        index_->sweep();
        next_sweep = Clock::now() + kSweepWindow;
      }
    } catch (const std::exception& e) {
      saker::log::error(std::string("job_submit/saker: background: ") + e.what());
    }
  }
}

}  // namespace saker::job_submit
