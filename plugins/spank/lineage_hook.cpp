#include "plugins/spank/lineage_hook.hpp"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

extern "C" {
#include <slurm/slurm.h>
}

#include "common/log.hpp"
#include "plugins/spank/attestation_hook.hpp"
#include "provenance/openlineage.hpp"
#include "provenance/openlineage_outputs.hpp"

namespace saker::spank {
namespace {

namespace ol = provenance::openlineage;

struct Step {
  bool started = false;  // START was written: the end event follows
  std::string dir;
  ol::StepEvent event;
  std::string ckpt_dir;  // SAKER_CKPT_DIR at launch ("" when unset)
  uid_t uid = 0;
  gid_t gid = 0;
  std::int64_t start_unix = 0;
  std::int64_t start_ns = 0;  // for the checkpoint listing (step_start_ns)
  bool first_node = false;    // node id 0: hashes the checkpoints
};
Step g_step;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string job_env(spank_t sp, const char* name) {
  char buf[4096];
  return spank_getenv(sp, name, buf, sizeof buf) == ESPANK_SUCCESS ? std::string(buf) : std::string();
}

bool write(const std::string& what) {
  try {
    const std::string name = ol::event_file_name(g_step.event);
    if (const std::string problem = ol::write_event(g_step.dir, name, ol::event_json(g_step.event)); !problem.empty()) {
      saker::log::error("OpenLineage: " + what + ": " + problem + " (openlineage-dir= in plugstack.conf)");
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    saker::log::error("OpenLineage: " + what + ": " + e.what());
    return false;
  }
}

// The START event; throws on a malformed node record.
void start(spank_t sp, const Config& config) {
  const StepIds ids = step_ids(sp);
  if (ids.step_id == SLURM_EXTERN_CONT) return;  // no tasks of the user's
  const char* node_env = std::getenv("SLURMD_NODENAME");
  const std::string node = node_env != nullptr ? node_env : "";
  const std::string what = "step " + std::to_string(ids.job_id) + "." + step_name(ids.step_id);
  const auto record = read_node_record(node_record_path(config.state_dir, node, ids.job_id));
  if (!record) {
    saker::log::error("OpenLineage: " + what + ": node " + node + " has no record of the job (the spank_saker job prolog "
                      "did not run; set PrologFlags=Alloc in slurm.conf); no events for it");
    return;
  }
  spank_get_item(sp, S_JOB_UID, &g_step.uid);
  spank_get_item(sp, S_JOB_GID, &g_step.gid);
  std::uint32_t node_id = 1;
  g_step.first_node = spank_get_item(sp, S_JOB_NODEID, &node_id) == ESPANK_SUCCESS && node_id == 0;
  g_step.event.restart_count = record->restart_count;  // from slurmctld, through the prolog
  g_step.dir = config.openlineage_dir;
  g_step.start_ns = ol::step_start_ns();
  g_step.start_unix = std::time(nullptr);
  g_step.ckpt_dir = job_env(sp, "SAKER_CKPT_DIR");
  ol::StepEvent& e = g_step.event;
  e.type = ol::EventType::start;
  e.time_ms = now_ms();
  e.job_namespace = config.openlineage_namespace;
  e.job_name = job_env(sp, "SLURM_JOB_NAME");
  e.facts = build_attestation(ids, *record, node, stated_audit_log(config, node), g_step.start_unix);
  g_step.started = write("START of " + what);
}

}  // namespace

void lineage_step_start(spank_t sp, const Config& config) {
  g_step = Step{};
  if (config.openlineage_dir.empty()) return;
  try {
    start(sp, config);
  } catch (const std::exception& e) {
    g_step.started = false;
    saker::log::error(std::string("OpenLineage: the step's START event: ") + e.what() + "; no events for this step");
  }
}

void lineage_task_exit(spank_t sp) {
  if (!g_step.started) return;
  int status = 0;
  // A status slurmstepd cannot give counts as a success: FAIL only on a failure it saw.
  if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS) status = 0;
  ol::record_task_exit(g_step.event, status);
}

void lineage_step_end() {
  if (!g_step.started) return;
  g_step.started = false;
  ol::StepEvent& e = g_step.event;
  if (g_step.ckpt_dir.empty()) {
    e.outputs_note = "SAKER_CKPT_DIR was not set in the step's environment: outputs unknown";
  } else {
    const ol::HashLimits hash = g_step.first_node ? ol::HashLimits{kHashBytes, kHashMs} : ol::HashLimits{};
    ol::Listing l = ol::list_checkpoints_as(g_step.ckpt_dir, g_step.uid, g_step.gid, g_step.start_ns, kListMs, hash);
    e.outputs = std::move(l.outputs);
    e.outputs_note = std::move(l.note);
    if (!g_step.first_node && !e.outputs.empty())
      e.outputs_note += std::string(e.outputs_note.empty() ? "" : "; ") +
                        "the checkpoints' SHA-256 is in the end event of the step's first node, which alone reads them";
  }
  ol::finish(e, now_ms());
  e.facts.audit_head = audit_head_text(e.facts.audit_log);  // each event states the head at its time
  write(std::string(ol::type_name(e.type)) + " of step " + e.facts.job_id + "." + e.facts.step_id);
}

}  // namespace saker::spank
