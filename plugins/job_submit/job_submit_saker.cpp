// job_submit_saker.so: slurmctld's entry points, a thin shell over libsaker_policy
// (see service.hpp for what runs where, and why).
// Every entry point runs under saker::plugin::guarded so that no exception can reach
// slurmctld (which would take the controller down for every user).
#include "config.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "common/log.hpp"
#include "plugins/c_boundary.hpp"
#include "plugins/job_submit/request.hpp"
#include "plugins/job_submit/service.hpp"
#include "policies/audit.hpp"

// Slurm looks these up by name; extern "C" keeps them unmangled and global.
extern "C" {
extern const char plugin_name[];
extern const char plugin_type[];
extern const uint32_t plugin_version;
const char plugin_name[] = "Saker data-residency and data-locality policy";
const char plugin_type[] = "job_submit/saker";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;
// libslurm's allocator: strings handed to slurmctld must come from it.
char* slurm_xstrdup(const char* str);
void slurm_xfree(void** item);
}

// slurmctld's job record; we only pass its pointer through.
struct job_record;

namespace {

using saker::job_submit::Service;
namespace policy = saker::policy;

std::unique_ptr<Service> g_service;

void set_string(char*& field, const std::string& value) {
  if (field != nullptr) slurm_xfree(reinterpret_cast<void**>(&field));
  field = slurm_xstrdup(value.c_str());
}

void tell_user(char** err_msg, const std::string& text) {
  if (err_msg == nullptr || text.empty()) return;
  if (*err_msg != nullptr) slurm_xfree(reinterpret_cast<void**>(err_msg));
  *err_msg = slurm_xstrdup(("saker: " + text).c_str());
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : "; ") + s;
  return out;
}

// Keeps the datasets on the job (its comment) so job_modify can find them again.
void mark_comment(job_desc_msg_t* job, const std::vector<policy::DatasetRef>& datasets) {
  std::string comment = job->comment != nullptr ? job->comment : "";
  const auto at = comment.find(saker::job_submit::kCommentMarker);
  if (at != std::string::npos) comment.erase(at > 0 ? at - 1 : at);  // users cannot pre-set it
  comment += (comment.empty() ? "" : " ") + std::string(saker::job_submit::kCommentMarker) +
             policy::format_dataset_list(datasets);
  set_string(job->comment, comment);
}

int decide(job_desc_msg_t* job, uint32_t uid, char** err_msg, const char* event) {
  policy::audit::Entry entry;
  entry.event = event;
  policy::JobRequest q;
  try {
    q = saker::job_submit::request_from(*job, uid);
    q.placement_only = std::string(event) == "modify";
  } catch (const saker::Error& e) {  // a malformed dataset list: refuse, say why
    tell_user(err_msg, e.what());
    entry.uid = uid;
    entry.decision_text = "deny";
    entry.reasons_extra = {e.what()};
    g_service->record(entry);
    return static_cast<int>(ESLURM_ACCESS_DENIED);
  }
  entry.uid = q.uid;
  entry.user = q.user;
  entry.account = q.account;
  if (q.job_id != 0) entry.job_id = std::to_string(q.job_id);
  entry.partition = q.partition;
  entry.datasets = q.datasets;
  std::string why;
  const policy::PolicyPtr p = g_service->policy(why);
  if (!p) {
    entry.decision_text = q.datasets.empty() ? "allow" : "deny";
    entry.reasons_extra = {"no valid data policy is loaded: " + why};
    g_service->record(entry);
    if (q.datasets.empty()) return SLURM_SUCCESS;
    tell_user(err_msg, "no valid data policy is loaded (" + why +
                           "), so jobs that declare datasets cannot be placed; ask your site administrators");
    return static_cast<int>(ESLURM_ACCESS_DENIED);
  }
  entry.revision = p->revision();
  const policy::Decision d = p->evaluate(q);
  entry.decision = &d;
  g_service->record(entry);
  if (d.kind == policy::DecisionKind::deny) {
    saker::log::info(std::string("job_submit/saker: ") + event + " denied for " + q.user + ": " + d.message());
    tell_user(err_msg, d.message());
    return static_cast<int>(ESLURM_ACCESS_DENIED);
  }
  if (!d.partition.empty()) set_string(job->partition, d.partition);
  if (!d.added_features.empty()) set_string(job->features, d.features_after(q.features));
  std::vector<std::string> notes = d.reasons;
  notes.insert(notes.end(), d.would_deny.begin(), d.would_deny.end());
  tell_user(err_msg, join(notes));
  return SLURM_SUCCESS;
}

}  // namespace

extern "C" int init(void) {
  return saker::plugin::guarded("init", SLURM_ERROR, [] {
    saker::plugin::log_to_slurm();
    saker::log::info(std::string("job_submit/saker loaded (Saker ") + PACKAGE_VERSION + ", built for Slurm " +
                     SAKER_SLURM_VERSION + ")");
    g_service = std::make_unique<Service>();
    return SLURM_SUCCESS;
  });
}

extern "C" int fini(void) {
  return saker::plugin::guarded("fini", SLURM_SUCCESS, [] {
    g_service.reset();
    saker::log::info("job_submit/saker unloaded");
    return SLURM_SUCCESS;
  });
}

extern "C" int job_submit(job_desc_msg_t* job_desc, uint32_t submit_uid, char** err_msg) {
  // An unexpected failure refuses the job (fail closed): the decision is a security one.
  return saker::plugin::guarded("job_submit", static_cast<int>(ESLURM_ACCESS_DENIED), [&] {
    if (!g_service) return SLURM_SUCCESS;
    const int rc = decide(job_desc, submit_uid, err_msg, "submit");
    if (rc == SLURM_SUCCESS) {
      const auto datasets = policy::datasets_from_env(job_desc->spank_job_env, job_desc->spank_job_env_size);
      if (!datasets.empty()) {
        mark_comment(job_desc, datasets);
        g_service->submitted_with_datasets();
      }
    }
    return rc;
  });
}

// Slurm 23.02 added err_msg to job_modify; 22.05 calls it with three arguments, and
// the wrong signature crashes slurmctld. The job record stays an incomplete type: the
// job's datasets come from the service's index (built from the jobs' comments).
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid,
                          char** err_msg) {
#else
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid) {
  char** err_msg = nullptr;
#endif
  return saker::plugin::guarded("job_modify", static_cast<int>(ESLURM_ACCESS_DENIED), [&] {
    if (!g_service) return SLURM_SUCCESS;
    // scontrol update sends the id as text (job_id_str, e.g. "12", "12_3", "12+0").
    uint32_t job_id = job_desc->job_id;
    if ((job_id == NO_VAL || job_id == 0) && job_desc->job_id_str != nullptr)
      job_id = static_cast<uint32_t>(std::strtoul(job_desc->job_id_str, nullptr, 10));
    std::vector<policy::DatasetRef> datasets;
    const bool known = g_service->datasets_of(job_id, datasets);
    if (job_desc->comment != nullptr && !datasets.empty()) mark_comment(job_desc, datasets);
    if (job_desc->partition == nullptr && job_desc->features == nullptr) return SLURM_SUCCESS;
    if (!known) {
      saker::log::info("job_submit/saker: update of job " + std::to_string(job_id) +
                       " refused: its datasets are not indexed yet; retry in a few seconds");
      return static_cast<int>(ESLURM_ACCESS_DENIED);
    }
    if (datasets.empty()) return SLURM_SUCCESS;
    // Re-decide with the job's datasets and the updated placement.
    std::string text = saker::job_submit::kDatasetsEnvPrefix() + policy::format_dataset_list(datasets);
    char* env[] = {text.data()};
    char** saved_env = job_desc->spank_job_env;
    const uint32_t saved_size = job_desc->spank_job_env_size;
    job_desc->spank_job_env = env;
    job_desc->spank_job_env_size = 1;
    int rc = SLURM_ERROR;
    try {
      rc = decide(job_desc, submit_uid, err_msg, "modify");
    } catch (...) {
      job_desc->spank_job_env = saved_env;
      job_desc->spank_job_env_size = saved_size;
      throw;
    }
    job_desc->spank_job_env = saved_env;
    job_desc->spank_job_env_size = saved_size;
    if (rc != SLURM_SUCCESS)
      saker::log::error("job_submit/saker: update of job " + std::to_string(job_id) + " refused");
    return rc;
  });
}
