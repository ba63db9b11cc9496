#include "launcher/run/allocation.hpp"

#include <signal.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <unistd.h>

#include <cstdlib>

#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/slurm_compat.hpp"

namespace saker::run {
namespace {

void say(const std::string& line) { log::info("saker-run: " + line); }

std::uint32_t job_number(const std::string& id) { return static_cast<std::uint32_t>(std::strtoul(id.c_str(), nullptr, 10)); }

// The state of job `id` (JOB_STATE_BASE bits), or -1 when it cannot be read.
int job_state(std::uint32_t id) {
  job_info_msg_t* info = nullptr;
  int state = -1;
  if (slurm_compat::load_job(&info, id, SHOW_LOCAL) == SLURM_SUCCESS && info != nullptr && info->record_count > 0) {
    state = static_cast<int>(info->job_array[0].job_state & JOB_STATE_BASE);
  }
  if (info != nullptr) slurm_free_job_info_msg(info);
  return state;
}

// How long a helper allocation may stay pending before it is cancelled and asked again
// (the node may have been given to another job meanwhile).
constexpr double kHelperPendingSeconds = 60;
constexpr double kRetrySeconds = 10;

}  // namespace

std::optional<JobView> load_job_view(const std::string& job_id) {
  job_info_msg_t* info = nullptr;
  if (slurm_compat::load_job(&info, job_number(job_id), SHOW_LOCAL) != SLURM_SUCCESS || info == nullptr ||
      info->record_count == 0) {
    log::warn("saker-run: cannot read job " + job_id + " from slurmctld (" + slurm_compat::last_error_text() +
              "); keeping the nodes saker-run knew");
    if (info != nullptr) slurm_free_job_info_msg(info);
    return std::nullopt;
  }
  const slurm_job_info_t& j = info->job_array[0];
  JobView view;
  if (j.nodes != nullptr) view.nodes = hostlist::expand(j.nodes);
  if (j.partition != nullptr) view.partition = j.partition;
  view.time_limit = j.time_limit;
  slurm_free_job_info_msg(info);
  return view;
}

bool release_nodes(const std::string& job_id, const std::vector<std::string>& kept, const std::string& lost) {
  const std::string list = hostlist::compress(kept);
  job_desc_msg_t shrink;
  slurm_init_job_desc_msg(&shrink);
  slurm_compat::job_id_field(shrink) = job_number(job_id);
  shrink.req_nodes = const_cast<char*>(list.c_str());
  if (slurm_update_job(&shrink) != SLURM_SUCCESS) {
    log::warn("saker-run: cannot release " + lost + " from job " + job_id + " (" + slurm_compat::last_error_text() +
              "); going on: when slurmctld declares " + lost + " down it requeues the job (or, with sbatch "
              "--no-kill, removes the node itself)");
    return false;
  }
  say("released lost node(s) " + lost + " from job " + job_id + " (job now on " + list + ")");
  return true;
}

Expander::~Expander() {
  for (const auto& [node, h] : helpers_) slurm_compat::kill_job(h.id, SIGKILL, 0);
}

bool Expander::bring_back(const std::string& node, const JobView& job, double now) {
  if (refused_) return false;
  auto it = helpers_.find(node);
  if (it == helpers_.end()) {
    if (retry_at_.count(node) && now < retry_at_[node]) return false;
    const std::string name = "saker-grow-" + job_id_, dependency = "expand:" + job_id_;
    job_desc_msg_t d;
    slurm_init_job_desc_msg(&d);
    d.name = const_cast<char*>(name.c_str());
    d.dependency = const_cast<char*>(dependency.c_str());
    d.req_nodes = const_cast<char*>(node.c_str());
    d.min_nodes = d.max_nodes = 1;
    if (!job.partition.empty()) d.partition = const_cast<char*>(job.partition.c_str());
    d.time_limit = job.time_limit;
    d.user_id = ::getuid();
    d.group_id = ::getgid();
    resource_allocation_response_msg_t* resp = nullptr;
    if (slurm_allocate_resources(&d, &resp) != SLURM_SUCCESS || resp == nullptr) {
      const int err = slurm_compat::last_error();
      if (resp != nullptr) slurm_free_resource_allocation_response_msg(resp);
      if (err == ESLURM_NOT_SUPPORTED) {
        refused_ = true;
        say("node " + node + " answers again, but slurmctld refuses job expansion (--dependency=expand: " +
            slurm_compat::last_error_text() + "), the only way Slurm gives a released node back to a running job; "
            "going on with " + std::to_string(job.nodes.size()) + " node(s): ask the site for "
            "SchedulerParameters=permit_job_expansion (saker-run(1), ELASTIC RUNS)");
      } else {
        log::warn("saker-run: cannot ask for node " + node + " to expand job " + job_id_ + " (" +
                  slurm_compat::last_error_text() + "); trying again in " + std::to_string(static_cast<int>(kRetrySeconds)) + " s");
        retry_at_[node] = now + kRetrySeconds;
      }
      return false;
    }
    it = helpers_.emplace(node, Helper{slurm_compat::job_id_field(*resp), now}).first;
    say("node " + node + " answers again: asked slurmctld for it (allocation " + std::to_string(slurm_compat::job_id_field(*resp)) +
        ", --dependency=expand:" + job_id_ + ")");
    slurm_free_resource_allocation_response_msg(resp);
  }
  const Helper h = it->second;
  const int state = job_state(h.id);
  if (state != JOB_RUNNING) {
    if (state == JOB_PENDING && now - h.since < kHelperPendingSeconds) return false;
    slurm_compat::kill_job(h.id, SIGKILL, 0);
    helpers_.erase(it);
    retry_at_[node] = now + kRetrySeconds;
    return false;
  }
  job_desc_msg_t merge;
  slurm_init_job_desc_msg(&merge);
  slurm_compat::job_id_field(merge) = h.id;
  merge.min_nodes = 0;
  const bool ok = slurm_update_job(&merge) == SLURM_SUCCESS;
  helpers_.erase(it);
  if (!ok) {
    log::warn("saker-run: cannot merge allocation " + std::to_string(h.id) + " (node " + node + ") into job " + job_id_ +
              " (" + slurm_compat::last_error_text() + "); cancelling it");
    slurm_compat::kill_job(h.id, SIGKILL, 0);
    retry_at_[node] = now + kRetrySeconds;
    return false;
  }
  say("node " + node + " is part of job " + job_id_ + " again (allocation " + std::to_string(h.id) + " merged into it)");
  return true;
}

}  // namespace saker::run
