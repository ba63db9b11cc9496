// job_submit_saker.so: slurmctld's entry points, a thin shell over libsaker_policy
// (see service.hpp for what runs where, and why).
// Every entry point runs under saker::plugin::guarded so that no exception can reach
// slurmctld (which would take the controller down for every user).
#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "common/log.hpp"
#include "common/slurm_compat.hpp"
#include "plugins/c_boundary.hpp"
#include "plugins/common/job_ref.hpp"
#include "plugins/job_submit/decide.hpp"
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

saker::job_submit::PolicyView policy_view() {
  saker::job_submit::PolicyView v;
  v.policy = g_service->policy(v.why_none);
  return v;
}

// Applies an outcome to the job description, records and logs it; the return code for slurmctld.
int carry_out(const saker::job_submit::Outcome& o, job_desc_msg_t* job, char** err_msg) {
  if (o.audit) g_service->record(o.audit_entry());
  if (!o.log_message.empty()) {
    if (o.refuse)
      saker::log::error("job_submit/saker: " + o.log_message);
    else
      saker::log::info("job_submit/saker: " + o.log_message);
  }
  tell_user(err_msg, o.user_message);
  if (o.refuse) return static_cast<int>(ESLURM_ACCESS_DENIED);
  if (o.set_partition) set_string(job->partition, *o.set_partition);
  if (o.set_features) set_string(job->features, *o.set_features);
  if (o.set_admin_comment) set_string(job->admin_comment, *o.set_admin_comment);
  return SLURM_SUCCESS;
}

// Components of one het job are submitted in one RPC, judged one after the other by the
// same slurmctld thread: component 0's datasets wait here for the others.
thread_local std::optional<std::vector<policy::DatasetRef>> t_het_first;

int submit(job_desc_msg_t* job, uint32_t uid, char** err_msg) {
  using namespace saker::job_submit;
  policy::JobRequest q;
  try {
    q = request_from(*job, uid);
  } catch (const saker::Error& e) {  // a malformed dataset list: refuse, say why
    q.uid = uid;
    return carry_out(refuse_malformed("submit", q, e.what()), job, err_msg);
  }
  const bool het = job->het_job_offset != NO_VAL;
  if (het && job->het_job_offset == 0) t_het_first = q.datasets;
  if (het) {
    if (auto refused = check_het_component(job->het_job_offset, t_het_first, q)) return carry_out(*refused, job, err_msg);
  } else {
    t_het_first.reset();
  }
  const Outcome o = decide_submit(policy_view(), q, job->admin_comment);
  const int rc = carry_out(o, job, err_msg);
  if (rc == SLURM_SUCCESS && !q.datasets.empty()) g_service->submitted_with_datasets();
  return rc;
}

// The id as the update names it: text for "12_3" and "12+1", else the number.
std::string update_ref(const job_desc_msg_t& job) {
  if (job.job_id_str != nullptr && *job.job_id_str != '\0') return job.job_id_str;
  const std::uint32_t id = saker::slurm_compat::job_id_field(job);
  if (id != NO_VAL && id != 0) return std::to_string(id);
  return "";
}

int modify(job_desc_msg_t* job, uint32_t uid, char** err_msg) {
  using namespace saker::job_submit;
  Update u;
  u.ref_text = update_ref(*job);
  u.request.uid = uid;
  u.request.user = saker::plugins::identity_of(uid).user;
  if (job->partition != nullptr) u.request.partition = job->partition;
  if (job->features != nullptr) u.request.features = job->features;
  u.partition_given = job->partition != nullptr;
  u.features_given = job->features != nullptr;
  u.account_given = job->account != nullptr;
  if (job->account != nullptr) u.request.account = job->account;
  if (job->admin_comment != nullptr) u.admin_comment = job->admin_comment;
  if (const auto ref = saker::plugins::parse_job_ref(u.ref_text)) u.facts = g_service->facts_of(*ref);
  saker::log::debug("job_submit/saker: update of job '" + u.ref_text + "' (job_id " + std::to_string(saker::slurm_compat::job_id_field(*job)) + ")");
  return carry_out(decide_modify(policy_view(), u), job, err_msg);
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
    if (!g_service) return static_cast<int>(ESLURM_ACCESS_DENIED);
    return submit(job_desc, submit_uid, err_msg);
  });
}

// Slurm 23.02 added err_msg to job_modify; 22.05 calls it with three arguments, and
// the wrong signature crashes slurmctld. So in 22.05 a refused update reaches the user
// only as "Access/permission denied"; the reason goes to slurmctld.log and the audit log
// (see job_submit_saker(8)). The job record stays an incomplete type: the job's datasets
// come from the service's index (built from the jobs' admin_comment).
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid,
                          char** err_msg) {
#else
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid) {
  char** err_msg = nullptr;
#endif
  const int rc = saker::plugin::guarded("job_modify", static_cast<int>(ESLURM_ACCESS_DENIED), [&] {
    if (!g_service) return static_cast<int>(ESLURM_ACCESS_DENIED);
    return modify(job_desc, submit_uid, err_msg);
  });
  // slurmctld 24.11 and 26.05 (_update_job) turn a partition or account change into the
  // error "errno" when the association lookup finds none, which it never does without
  // accounting storage: the update then fails with whatever errno this RPC thread last
  // held (seen: "Resource temporarily unavailable"), or passes when it is 0. An update this
  // plugin allowed must not fail on a stale errno, so leave none behind.
  if (rc == SLURM_SUCCESS) errno = 0;
  return rc;
}
