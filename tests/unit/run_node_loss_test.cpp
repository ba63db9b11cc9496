#include <catch2/catch.hpp>

#include "launcher/run/node_loss.hpp"

using saker::run::is_srun_task_failure_line;
using saker::run::surviving_nodes;

TEST_CASE("srun's task-failure lines are recognised", "[run][node_loss]") {
  CHECK(is_srun_task_failure_line("srun: error: saker1: task 0: Exited with exit code 1"));
  CHECK(is_srun_task_failure_line("srun: error: node-12: tasks 0-3,7: Killed"));
  CHECK(is_srun_task_failure_line("srun: error: saker2: task 5: Terminated"));
  CHECK(is_srun_task_failure_line("srun: error: Node failure on saker2"));
}

TEST_CASE("other stderr lines do not start node probes", "[run][node_loss]") {
  CHECK_FALSE(is_srun_task_failure_line(""));
  CHECK_FALSE(is_srun_task_failure_line("srun: launch/slurm: _step_signal: Terminating StepId=1.0"));
  CHECK_FALSE(is_srun_task_failure_line("saker-train: step 25/200 loss 1.2"));
  CHECK_FALSE(is_srun_task_failure_line("rank 1: srun: error: saker1: task 0: Exited with exit code 1"));
  CHECK_FALSE(is_srun_task_failure_line("srun: error: Unable to create step for job 7: Job/step already completing"));
}

TEST_CASE("surviving_nodes drops the lost ones", "[run][node_loss]") {
  CHECK(surviving_nodes("saker[1-3]", {"saker2"}) == "saker[1,3]");
  CHECK(surviving_nodes("saker[1-2]", {"saker2"}) == "saker1");
  CHECK(surviving_nodes("saker[1-2]", {"saker1", "saker2"}).empty());
  CHECK(surviving_nodes("saker[1-2]", {}) == "saker[1-2]");
}

TEST_CASE("a failed srun task is reported as task, rank, node and signal or exit code", "[run][node_loss]") {
  using saker::run::parse_srun_task_failure;
  auto f = parse_srun_task_failure("srun: error: saker2: task 1: Killed");
  CHECK(f.detail == "task 1 (rank 1) on saker2 killed by SIGKILL");
  CHECK(f.exit_code == -1);
  f = parse_srun_task_failure("srun: error: saker1: task 0: Exited with exit code 127");
  CHECK(f.detail == "task 0 (rank 0) on saker1 exited with code 127");
  CHECK(f.exit_code == 127);
  CHECK(parse_srun_task_failure("srun: error: saker1: tasks 0-1: Terminated").detail ==
        "tasks 0-1 (rank 0-1) on saker1 killed by SIGTERM");
  CHECK(parse_srun_task_failure("srun: error: saker3: task 2: Segmentation fault (core dumped)").detail ==
        "task 2 (rank 2) on saker3 killed by SIGSEGV");
  CHECK(parse_srun_task_failure("saker-train: step 3").detail.empty());
}
