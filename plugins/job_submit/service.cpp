#include "plugins/job_submit/service.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.hpp"

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
  audit_ = std::make_unique<policy::audit::Log>(config_.audit);
  thread_ = std::thread([this] { run(); });
}

Service::~Service() {
  {
    const std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const std::string problem = audit_->flush();
  if (!problem.empty()) saker::log::error("job_submit/saker: " + problem);
}

void Service::wake() { cv_.notify_all(); }

policy::PolicyPtr Service::policy(std::string& why) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!policy_) why = why_none_;
  return policy_;
}

void Service::record(const policy::audit::Entry& entry) {
  if (!audit_->enqueue(policy::audit::fields_json(entry)))
    saker::log::error("job_submit/saker: audit queue full; a record was dropped (a gap record will say how many)");
  wake();
}

bool Service::datasets_of(std::uint32_t job_id, std::vector<policy::DatasetRef>& out) const {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = job_datasets_.find(job_id);
    if (it != job_datasets_.end()) {
      out = it->second;
      return true;
    }
  }
  out.clear();
  const std::lock_guard<std::mutex> lock(mutex_);
  return indexed_once_.load() && unindexed_.empty();
}

void Service::submitted_with_datasets() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    unindexed_.push_back(std::chrono::steady_clock::now());
  }
  wake();
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
    auto fresh = policy::Policy::load_file(config_.policy);
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

// Learns the ids of jobs that declared datasets from slurmctld itself (this thread
// holds none of slurmctld's locks, so the RPCs are served normally). Cheap in steady
// state: job ids are handed out in sequence, so after one full load at start only the
// new ids are asked for, one small RPC each; a full load is the fallback when an
// expected job does not show up within 10 s (ids skipped, job refused after us).
void Service::index_jobs() {
  bool stale = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (indexed_once_.load() && unindexed_.empty()) return;
    stale = !unindexed_.empty() && unindexed_.front() < std::chrono::steady_clock::now() - std::chrono::seconds(10);
  }
  if (!indexed_once_.load() || stale) {
    if (index_all()) {
      const std::lock_guard<std::mutex> lock(mutex_);
      unindexed_.clear();
      indexed_once_.store(true);
    }
    return;
  }
  for (int misses = 0; misses < 3;) {
    bool exists = false;
    if (!index_next(max_job_id_ + 1 + static_cast<std::uint32_t>(misses), exists)) return;
    if (exists) {
      max_job_id_ += 1 + static_cast<std::uint32_t>(misses);
      misses = 0;
      const std::lock_guard<std::mutex> lock(mutex_);
      if (unindexed_.empty()) return;
    } else {
      ++misses;
    }
  }
}

namespace {

bool marked_datasets(const slurm_job_info_t& job, std::vector<policy::DatasetRef>& out) {
  if (job.comment == nullptr) return false;
  const char* at = std::strstr(job.comment, kCommentMarker);
  if (at == nullptr) return false;
  std::string list = at + std::strlen(kCommentMarker);
  list = list.substr(0, list.find(' '));
  try {
    out = policy::parse_dataset_list(list);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

bool Service::index_all() {
  job_info_msg_t* msg = nullptr;
  if (slurm_load_jobs(0, &msg, SHOW_ALL) != SLURM_SUCCESS || msg == nullptr) return false;
  std::unordered_map<std::uint32_t, std::vector<policy::DatasetRef>> found;
  for (std::uint32_t i = 0; i < msg->record_count; ++i) {
    const slurm_job_info_t& job = msg->job_array[i];
    max_job_id_ = std::max(max_job_id_, job.job_id);
    std::vector<policy::DatasetRef> datasets;
    if (marked_datasets(job, datasets)) found[job.job_id] = std::move(datasets);
  }
  slurm_free_job_info_msg(msg);
  const std::lock_guard<std::mutex> lock(mutex_);
  job_datasets_ = std::move(found);
  return true;
}

// Asks for one job id. Returns false on a transport error (try again later); `exists`
// tells whether the job is there.
bool Service::index_next(std::uint32_t job_id, bool& exists) {
  job_info_msg_t* msg = nullptr;
  exists = false;
  if (slurm_load_job(&msg, job_id, SHOW_ALL) != SLURM_SUCCESS || msg == nullptr)
    return slurm_get_errno() == ESLURM_INVALID_JOB_ID;
  std::vector<policy::DatasetRef> datasets;
  const bool marked = msg->record_count > 0 && marked_datasets(msg->job_array[0], datasets);
  exists = msg->record_count > 0;
  slurm_free_job_info_msg(msg);
  if (marked) {
    const std::lock_guard<std::mutex> lock(mutex_);
    job_datasets_[job_id] = std::move(datasets);
    if (!unindexed_.empty()) unindexed_.pop_front();
  }
  return true;
}

void Service::run() {
  auto next_stat = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stop_) return;
    }
    try {
      const std::string problem = audit_->flush();
      if (!problem.empty()) saker::log::error("job_submit/saker: " + problem);
      if (std::chrono::steady_clock::now() >= next_stat) {
        poll_policy();
        next_stat = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.reload_interval_ms);
      }
      index_jobs();
    } catch (const std::exception& e) {
      saker::log::error(std::string("job_submit/saker: background: ") + e.what());
    }
  }
}

}  // namespace saker::job_submit
