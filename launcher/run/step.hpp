// One attempt of the job's step: either `srun` inside a Slurm allocation or N local
// processes (saker-run --local). The supervisor only sees this interface.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "launcher/run/process.hpp"
#include "launcher/run/rank_env.hpp"

namespace saker::run {

struct StepResult {
  bool all_ok = false;         // every rank (or srun) exited 0
  bool all_preempted = false;  // every rank that exited on its own used kPreemptedExitCode
  std::string detail;          // what ended the step, for logs and the summary
  bool refused = false;        // the failing rank exited with a refusal code (is_refusal_exit_code)
  int refused_code = 0;        // which one
};

class Step {
 public:
  virtual ~Step() = default;
  // Starts the attempt with `env` added to each rank's environment.
  virtual void start(const Env& env, const sigset_t& child_mask) = 0;
  // Passes a signal on to every rank (never to saker-run itself).
  virtual void forward(int sig) = 0;
  // Asks every rank to stop (SIGTERM) so it can checkpoint; the caller SIGKILLs after its
  // grace period.
  virtual void terminate() { forward(SIGTERM); }
  // SIGKILLs everything still running.
  virtual void kill_all() = 0;
  // Reaps what has exited (never blocks); true once the whole step has ended.
  virtual bool reap() = 0;
  virtual StepResult result() const = 0;
  // True once srun reported a failed task or a node failure during this attempt (while
  // srun itself may still wait for a task on a node that no longer answers).
  virtual bool task_failure_seen() const { return false; }
  // When srun's first task-failure line arrived (wall clock; 0: none), for the recovery
  // breakdown's "detect".
  virtual double task_failure_at() const { return 0; }
  // srun arguments that place the next attempts (an elastic run's nodes and task count,
  // elastic.hpp placement_args); ignored by a local step.
  virtual void place(std::vector<std::string> /*srun_args*/) {}
};

// N ranks as children of this process. Like srun --kill-on-bad-exit, the first rank
// that fails (non-zero, not the preempted code) gets the others SIGKILLed.
std::unique_ptr<Step> make_local_step(int ranks, std::vector<std::string> program);

// `srun --mpi=pmi2 --kill-on-bad-exit=1 [srun_args] SELF --exec-rank -- program`:
// each task re-enters saker-run, which sets the rank variables and execs the program.
std::unique_ptr<Step> make_srun_step(std::vector<std::string> srun_args, std::string self,
                                     std::vector<std::string> program);

// The srun command line make_srun_step runs (exposed for tests and --dry-run).
std::vector<std::string> srun_command(const std::vector<std::string>& srun_args, const std::string& self,
                                      const std::vector<std::string>& program);

}  // namespace saker::run
