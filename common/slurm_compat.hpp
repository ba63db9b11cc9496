// Slurm's C API where it differs between the releases Saker supports (22.05 to 26.05), in
// one place, chosen at compile time from SLURM_VERSION_NUMBER. The job_submit plugin's own
// entry points (job_modify gained err_msg in 23.02) are chosen in the plugin itself.
// tests/scripts/slurm_headers_compat.sh compiles every Slurm-facing file against each
// vendored release's headers.
#pragma once

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>

namespace saker::slurm_compat {

// 23.11 made hostlist_t the struct itself; before, it was the pointer to it.
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0)
using Hostlist = hostlist_t*;
#else
using Hostlist = hostlist_t;
#endif

// A program calls this once before its first RPC to slurmctld (a plugin never does: the
// daemon around it has read its configuration). slurm_init() reads slurm.conf and loads the
// auth and cred plugins; 22.05's libslurm did so on first use, but 24.11's and 26.05's
// find no plugin directory without it and call fatal(), which exits the program. Call it
// only inside a job: without a slurm.conf it is fatal too.
inline void client_init() {
  static std::once_flag once;
  std::call_once(once, [] { slurm_init(nullptr); });
}

// The reason of the last failed libslurm call. slurm_get_errno() is gone in 24.05; it only
// ever returned errno, which libslurm sets in every release.
inline std::string last_error_text() { return slurm_strerror(errno); }
inline int last_error() { return errno; }

// 26.05 names a job by slurm_step_id_t (job id and sluid) in slurm_load_job(),
// slurm_kill_job(), slurm_requeue() and job_desc_msg_t.
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
inline slurm_step_id_t step_id_of(std::uint32_t job_id) {
  slurm_step_id_t id = SLURM_STEP_ID_INITIALIZER;
  id.job_id = job_id;
  return id;
}
inline int load_job(job_info_msg_t** out, std::uint32_t job_id, std::uint16_t flags) {
  return slurm_load_job(out, step_id_of(job_id), flags);
}
inline int requeue(std::uint32_t job_id, std::uint32_t flags) { return slurm_requeue(step_id_of(job_id), flags); }
inline int kill_job(std::uint32_t job_id, std::uint16_t signal, std::uint16_t flags) {
  return slurm_kill_job(step_id_of(job_id), signal, flags);
}
// The job id of a job_desc_msg_t, slurm_job_info_t or resource_allocation_response_msg_t.
template <class Record>
auto& job_id_field(Record& r) {
  return r.step_id.job_id;
}
#else
inline int load_job(job_info_msg_t** out, std::uint32_t job_id, std::uint16_t flags) {
  return slurm_load_job(out, job_id, flags);
}
inline int requeue(std::uint32_t job_id, std::uint32_t flags) { return slurm_requeue(job_id, flags); }
inline int kill_job(std::uint32_t job_id, std::uint16_t signal, std::uint16_t flags) {
  return slurm_kill_job(job_id, signal, flags);
}
template <class Record>
auto& job_id_field(Record& r) {
  return r.job_id;
}
#endif

}  // namespace saker::slurm_compat
