#include "plugins/spank/attestation_hook.hpp"

#include <cstdlib>
#include <ctime>
#include <string>

#include "common/log.hpp"
#include "plugins/spank/attestation_step.hpp"
#include "plugins/spank/launch_audit.hpp"
#include "provenance/site_key.hpp"

namespace saker::spank {

namespace {

std::string g_path;  // this step's attestation file on this node ("" when none)

}  // namespace

StepIds step_ids(spank_t sp) {
  StepIds ids;
  spank_get_item(sp, S_JOB_ID, &ids.job_id);
  spank_get_item(sp, S_JOB_STEPID, &ids.step_id);
  if (spank_get_item(sp, S_JOB_ARRAY_ID, &ids.array_job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ARRAY_TASK_ID, &ids.array_task_id) != ESPANK_SUCCESS)
    ids.array_job_id = ids.array_task_id = 0;
  return ids;
}

std::string stated_audit_log(const Config& config, const std::string& node) {
  return config.attest_audit_log.empty() ? launch_audit_path(config.state_dir, node) : config.attest_audit_log;
}

namespace {

// The site key, with the public half a step on this node derived before while the key
// file is the same and the note binds it to this seed (attestation_step.hpp
// known_key_path); derived and noted otherwise.
provenance::SiteKey read_key(const Config& config, const std::string& node) {
  const std::string noted = known_key_path(config.state_dir, node);
  const auto known = read_known_key(noted);
  provenance::SiteKey key = provenance::read_site_key(config.attest_key, 0, known ? &*known : nullptr);
  if (!key.pub_known)
    if (const std::string problem = write_known_key(noted, key); !problem.empty())
      saker::log::warn("attestation: " + problem + " (each step derives the public key again)");
  return key;
}

}  // namespace

void attest_step(spank_t sp, const Config& config) {
  g_path.clear();
  if (config.attest_key.empty()) return;
  const char* node_env = std::getenv("SLURMD_NODENAME");
  const std::string node = node_env != nullptr ? node_env : "";
  const StepIds ids = step_ids(sp);
  const std::string what = "attestation of step " + std::to_string(ids.job_id) + "." + step_name(ids.step_id);
  try {
    const auto record = read_step_node_record(node_record_path(config.state_dir, node, ids.job_id));
    if (!record) {
      saker::log::error(what + ": node " + node + " has no record of the job (the spank_saker job prolog did not run; "
                        "set PrologFlags=Alloc in slurm.conf); its tasks run unattested");
      return;
    }
    std::uint32_t gid = 0;
    spank_get_item(sp, S_JOB_GID, &gid);
    const provenance::SiteKey key = read_key(config, node);
    const provenance::Attestation a =
        build_attestation(ids, *record, node, stated_audit_log(config, node), std::time(nullptr));
    const std::string text = provenance::format_envelope(provenance::sign(a, key));
    const std::string path = attestation_path(config.attest_dir, node, ids.job_id, step_name(ids.step_id));
    if (const std::string problem = write_attestation_file(path, text, gid); !problem.empty()) {
      saker::log::error(what + ": " + problem + "; its tasks run unattested (check attest-dir= in plugstack.conf)");
      return;
    }
    g_path = path;
  } catch (const std::exception& e) {
    saker::log::error(what + ": " + e.what() + "; its tasks run unattested");
  }
}

void attest_task_init(spank_t sp) {
  if (g_path.empty()) return;
  if (spank_setenv(sp, "SAKER_ATTESTATION", g_path.c_str(), 1) != ESPANK_SUCCESS)
    saker::log::error("attestation: cannot set SAKER_ATTESTATION in the task's environment");
}

void attest_forget_job(const Config& config) {
  if (config.attest_key.empty()) return;
  const char* node = std::getenv("SLURMD_NODENAME");
  const char* id = std::getenv("SLURM_JOB_ID");
  if (node == nullptr || id == nullptr) return;
  try {
    remove_job_attestations(config.attest_dir, node, static_cast<std::uint32_t>(std::strtoul(id, nullptr, 10)));
  } catch (const std::exception& e) {
    saker::log::error(std::string("attestation: job epilog: ") + e.what());
  }
}

}  // namespace saker::spank
