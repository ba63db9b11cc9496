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
#include "plugins/spank/residency.hpp"

extern "C" {
#include <slurm/slurm.h>
}

namespace saker::spank {

namespace {

ResidencyVerdict g_verdict;

std::vector<policy::DatasetRef> from_job_record(spank_t sp) {
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || job_id == 0) return {};
  job_info_msg_t* msg = nullptr;
  if (slurm_load_job(&msg, job_id, SHOW_ALL) != SLURM_SUCCESS || msg == nullptr) return {};
  std::vector<policy::DatasetRef> out;
  try {
    if (msg->record_count > 0) out = datasets_from_comment(msg->job_array[0].comment);
  } catch (const std::exception&) {
  }
  slurm_free_job_info_msg(msg);
  return out;
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
  merge_datasets(datasets, from_job_record(sp));
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
