// job_submit_saker.so: slurmctld's entry points, a thin shell over libsaker_policy.
// Every entry point runs under saker::plugin::guarded so that no exception can reach
// slurmctld (which would take the controller down for every user).
#include "config.h"

#include <string>

#include "common/log.hpp"
#include "plugins/c_boundary.hpp"
#include "policies/dataset_ref.hpp"

// Slurm looks these up by name; extern "C" keeps them unmangled and global.
extern "C" {
extern const char plugin_name[];
extern const char plugin_type[];
extern const uint32_t plugin_version;
const char plugin_name[] = "Saker data-residency and data-locality policy";
const char plugin_type[] = "job_submit/saker";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;
}

// slurmctld's job record; we only pass its pointer through.
struct job_record;

namespace {

std::string describe_request(const job_desc_msg_t* job, uint32_t uid) {
  const auto datasets = saker::policy::datasets_from_env(job->spank_job_env, job->spank_job_env_size);
  std::string text = "uid=" + std::to_string(uid);
  text += " partition=" + std::string(job->partition != nullptr ? job->partition : "(default)");
  text += " datasets=" + (datasets.empty() ? std::string("(none)") : saker::policy::format_dataset_list(datasets));
  return text;
}

}  // namespace

extern "C" int init(void) {
  return saker::plugin::guarded("init", SLURM_ERROR, [] {
    saker::plugin::log_to_slurm();
    saker::log::info(std::string("job_submit/saker loaded (Saker ") + PACKAGE_VERSION + ", built for Slurm " +
                     SAKER_SLURM_VERSION + ")");
    return SLURM_SUCCESS;
  });
}

extern "C" int fini(void) {
  return saker::plugin::guarded("fini", SLURM_SUCCESS, [] {
    saker::log::info("job_submit/saker unloaded");
    return SLURM_SUCCESS;
  });
}

extern "C" int job_submit(job_desc_msg_t* job_desc, uint32_t submit_uid, char** /*err_msg*/) {
  return saker::plugin::guarded("job_submit", SLURM_ERROR, [&] {
    saker::log::info("job_submit: " + describe_request(job_desc, submit_uid));
    return SLURM_SUCCESS;
  });
}

// Slurm 23.02 added err_msg to job_modify; 22.05 calls it with three arguments, and
// the wrong signature crashes slurmctld. the job record stays an incomplete type.
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid,
                          char** /*err_msg*/) {
#else
extern "C" int job_modify(job_desc_msg_t* job_desc, struct job_record* /*job_ptr*/, uint32_t submit_uid) {
#endif
  return saker::plugin::guarded("job_modify", SLURM_ERROR, [&] {
    saker::log::info("job_modify: " + describe_request(job_desc, submit_uid));
    return SLURM_SUCCESS;
  });
}
