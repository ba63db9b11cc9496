// What saker-run does when a node of its job is lost, instead of waiting for slurmctld
// to notice (SlurmdTimeout plus its ping cycle, ~30 s here; minutes on real clusters):
//   1. shrink the running job to the nodes that still answer, so the lost node no longer
//      holds the job in COMPLETING (a job owner may do this while the job runs);
//   2. requeue the job (the requeue hold starts at once);
//   3. once the job is pending, exclude the lost nodes and restore the node count, so
//      the next run has the same world size on healthy nodes.
// Step 3 cannot be done by the batch script itself: slurmctld accepts ExcNodeList only
// for pending jobs, and a requeued job becomes pending only after the batch script
// exits. slurmctld retries that update for up to 5 s on its side, so a forked helper
// sends it and saker-run exits right away.
#pragma once

#include <string>
#include <vector>

#include "launcher/run/supervisor.hpp"

namespace saker::run {

// Lines of srun's stderr that say a task of the step failed. Only then does saker-run
// probe the nodes (each probe is a connection slurmd logs as an error).
bool is_srun_task_failure_line(const std::string& line);

// What one of srun's task-failure lines says, in saker-run's words: "srun: error: saker2:
// task 1: Killed" gives {"task 1 (rank 1) on saker2 killed by SIGKILL", -1}; "... task 0:
// Exited with exit code 3" gives {"task 0 (rank 0) on saker1 exited with code 3", 3}.
// Empty detail when the line is not one.
struct TaskFailure {
  std::string detail;
  int exit_code = -1;  // -1 when killed by a signal
};
TaskFailure parse_srun_task_failure(const std::string& line);

// The nodes of `nodelist` that are not in `lost`, as a compressed hostlist.
std::string surviving_nodes(const std::string& nodelist, const std::vector<std::string>& lost);

// Steps 1-3 above for job `job_id` allocated on `nodelist`. Logs each action. Returns
// false (after logging why) when the job could not be requeued. `node_count`: the nodes the
// requeued job asks for (0: as many as `nodelist` has; an elastic run that shrank passes its
// original size).
bool evacuate_and_requeue(const std::string& job_id, const std::string& nodelist,
                          const std::vector<std::string>& lost, unsigned node_count = 0);

}  // namespace saker::run
