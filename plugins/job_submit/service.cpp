#include "plugins/job_submit/service.hpp"

#include <sys/stat.h>

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
// holds none of slurmctld's locks, so the RPC is served normally).
void Service::index_jobs() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto expired = std::chrono::steady_clock::now() - std::chrono::seconds(10);
    while (!unindexed_.empty() && unindexed_.front() < expired) unindexed_.pop_front();
    if (indexed_once_.load() && unindexed_.empty()) return;
  }
  job_info_msg_t* msg = nullptr;
  if (slurm_load_jobs(0, &msg, SHOW_ALL) != SLURM_SUCCESS || msg == nullptr) return;
  std::unordered_map<std::uint32_t, std::vector<policy::DatasetRef>> found;
  for (std::uint32_t i = 0; i < msg->record_count; ++i) {
    const slurm_job_info_t& job = msg->job_array[i];
    if (job.comment == nullptr) continue;
    const char* at = std::strstr(job.comment, kCommentMarker);
    if (at == nullptr) continue;
    std::string list = at + std::strlen(kCommentMarker);
    list = list.substr(0, list.find(' '));
    try {
      found[job.job_id] = policy::parse_dataset_list(list);
    } catch (const std::exception&) {
    }
  }
  slurm_free_job_info_msg(msg);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t fresh = 0;
    for (const auto& [id, _] : found) fresh += job_datasets_.count(id) == 0 ? 1 : 0;
    for (; fresh > 0 && !unindexed_.empty(); --fresh) unindexed_.pop_front();
    job_datasets_ = std::move(found);
  }
  indexed_once_.store(true);
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
