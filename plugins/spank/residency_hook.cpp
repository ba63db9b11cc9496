// What we trust, and why (zero trust: users control their job's environment):
//  - The node name comes from slurmstepd's OWN process environment (SLURMD_NODENAME,
//    which slurmd sets for the slurmstepd it forks, and which differs per node with
//    multiple slurmd), read with getenv(), never from the job's environment
//    (spank_getenv), which srun copies from the user's shell.
//  - The datasets are the union of three sources, each delivered by Slurm: the value
//    of the --dataset option as Slurm hands it to the remote context, the job's
//    control environment as slurmstepd received it (SLURM_SPANK_SAKER_DATASETS), and
//    the list job_submit_saker.so stored in the job's record in slurmctld (its
//    comment marker, read with slurm_load_job as root). A union means a forged source
//    can only ADD datasets, i.e. make the check stricter; dropping --dataset from a
//    later srun does not drop the datasets slurmctld recorded for the job.
#include "plugins/spank/residency_hook.hpp"

#include <cstdio>
#include <cstdlib>

#include "common/log.hpp"
#include "plugins/common/dataset_marker.hpp"
#include "plugins/spank/residency.hpp"

extern "C" {
#include <slurm/slurm.h>
}

namespace saker::spank {

namespace {

ResidencyVerdict g_verdict;

// The marker job_submit_saker.so keeps in the job's admin_comment (every record the
// load returns: a het job's components bind each other). Fails closed: a marker that
// does not parse is an error, never "no datasets".
bool from_job_record(spank_t sp, std::vector<policy::DatasetRef>& out, std::string& problem) {
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || job_id == 0) return true;
  job_info_msg_t* msg = nullptr;
  if (slurm_load_job(&msg, job_id, SHOW_ALL | SHOW_LOCAL) != SLURM_SUCCESS || msg == nullptr) return true;
  bool ok = true;
  for (std::uint32_t i = 0; i < msg->record_count && ok; ++i) {
    const plugins::MarkerRead r = plugins::read_marker(msg->job_array[i].admin_comment);
    if (r.state == plugins::MarkerRead::State::malformed) {
      problem = "job " + std::to_string(msg->job_array[i].job_id) + ": " + r.problem;
      ok = false;
    }
    merge_datasets(out, r.datasets);
  }
  slurm_free_job_info_msg(msg);
  return ok;
}

}  // namespace

void residency_prepare(spank_t sp, const std::string& policy_path, const std::vector<policy::DatasetRef>& option_value) {
  std::vector<policy::DatasetRef> datasets = option_value;
  char value[4096];
  if (spank_getenv(sp, "SLURM_SPANK_SAKER_DATASETS", value, sizeof value) == ESPANK_SUCCESS) {
    try {
      merge_datasets(datasets, policy::parse_dataset_list(value));
    } catch (const std::exception& e) {
      g_verdict = {true, std::string("the job's dataset list is malformed: ") + e.what()};
      return;
    }
  }
  std::string problem;
  if (!from_job_record(sp, datasets, problem)) {
    g_verdict = {true, "the datasets slurmctld recorded for this job cannot be read (" + problem + ")"};
    return;
  }
  const char* node = std::getenv("SLURMD_NODENAME");
  g_verdict = check_residency(policy_path, node != nullptr ? node : "", datasets);
  if (!g_verdict.message.empty())
    saker::log::info("residency: " + policy::format_dataset_list(datasets) + " on " + (node != nullptr ? node : "?") +
                     ": " + g_verdict.message);
}

int residency_enforce(spank_t /*sp*/) {
  if (g_verdict.message.empty()) return 0;
  // The task's stderr is the user's output at this point: say it where they look.
  std::fprintf(stderr, "saker: %s%s\n", g_verdict.message.c_str(),
               g_verdict.refuse ? "; the task was stopped before it started" : "");
  std::fflush(stderr);
  if (!g_verdict.refuse) return 0;
  saker::log::error("residency: task refused: " + g_verdict.message);
  return -1;
}

}  // namespace saker::spank
