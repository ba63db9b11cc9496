// saker-run's supervisor: a small state machine of named steps, run until the job ends:
//
//   run_attempt   start the step (srun or local ranks) and watch it (AttemptWatch)
//   classify      what ended it (supervisor.hpp classify: success, preempted, failed,
//                 timed out, resized)
//   decide        restart in place, shrink onto the surviving nodes, grow back, requeue,
//                 wait for lost nodes, or give up (supervisor.hpp decide_attempt, elastic.hpp)
//   apply         act on the decision (release a lost node, requeue, wait) and say so
//
// The decisions are pure functions, unit-tested without Slurm (tests/unit/run_*); this
// class wires them to processes, signals and slurmctld.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run/allocation.hpp"
#include "launcher/run/attempt_watch.hpp"
#include "launcher/run/elastic.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/run/options.hpp"
#include "launcher/run/process.hpp"
#include "launcher/run/recovery.hpp"
#include "launcher/run/rank_env.hpp"
#include "launcher/run/runtime_dir.hpp"
#include "launcher/run/step.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {

class Supervisor {
 public:
  Supervisor(const RunOptions& options, std::string self);
  // Runs the job; returns saker-run's exit code.
  int run();

 private:
  struct AttemptRun;  // one attempt's watch and timestamps (supervise.cpp)

  std::optional<int> prepare();
  Attempt run_attempt(AttemptRun& run);
  void finish_attempt(const RunDir& run_dir, const AttemptWatch& watch, Attempt& attempt, AttemptRun& run);
  Decision decide_next(const Attempt& attempt, const AttemptRun& run);
  std::optional<int> apply(const Decision& d, const Attempt& attempt);
  Env attempt_env(const RunDir& run_dir, int port, int number);
  std::optional<std::string> grow_sense(const RunDir& run_dir, double now);
  std::optional<int> elastic_setup();
  void release_in_background(const std::vector<std::string>& kept);
  void reap_helpers();

  const RunOptions& o_;
  std::string self_;
  bool in_slurm_ = false;
  std::string job_id_, run_id_, master_addr_, runtime_base_, restarts_by_slurm_;
  Env transit_;
  std::unique_ptr<Step> step_;
  std::unique_ptr<SignalWatcher> signals_;
  Policy policy_;
  HangLimit hang_;
  std::vector<Attempt> attempts_;
  int restarts_ = 0;

  // Elastic state (inside Slurm): where the ranks run, the bounds, the nodes lost.
  bool elastic_ = false;            // the job's tasks spread evenly: it can be resized
  unsigned original_nodes_ = 0;
  NodeRange range_;
  Placement placement_;
  std::vector<std::string> lost_home_;   // nodes lost from the run, candidates to come back
  std::vector<std::string> lost_ever_;   // every node lost (the next attempts use srun --overlap)
  std::optional<Placement> pending_grow_;  // where the next attempt runs after a grow
  std::vector<std::string> last_lost_;     // the nodes the last attempt lost
  NodePlan last_plan_;                     // what they lead to
  std::unique_ptr<Expander> expander_;
  std::vector<pid_t> helpers_;  // processes releasing lost nodes
  // The recovery breakdown of the next attempt (set when an attempt ends in a recovery).
  std::optional<RecoveryMarks> recovering_;
};

}  // namespace saker::run
