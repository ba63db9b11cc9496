// One attempt of the step, watched: the state machine saker-run runs while the ranks run
// (preemption signals and their grace period, --timeout, hung ranks, lost nodes, a grow at
// the next checkpoint boundary). It decides; the caller acts on its Orders (forward a
// signal, SIGTERM, SIGKILL) and feeds it what it senses through Senses, so every branch is
// unit-tested with a fake clock and fake senses, without processes or Slurm.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run/heartbeat.hpp"

namespace saker::run {

struct WatchConfig {
  double grace_s = 60;       // --grace
  double timeout_s = 0;      // --timeout (0: none)
  double resize_wait_s = 120;  // --resize-wait: how long the ranks may take to reach a checkpoint boundary
  bool probe_nodes = false;  // inside Slurm: probe the nodes once srun reports a failed task
  bool watch_hangs = false;  // hang detection on (heartbeats)
};

// What the watch asks the world about. Empty functions count as "nothing to report".
struct Senses {
  std::function<std::vector<std::string>()> lost_nodes;         // nodes whose slurmd does not answer
  std::function<std::optional<std::string>(double now)> hung;   // why a rank counts as hung, if one does
  std::function<std::optional<std::string>(double now)> grow;   // non-empty: a grow was just requested
};

// What the caller does after a tick.
struct Orders {
  std::vector<std::string> lines;  // to log ("saker-run: " + line)
  int forward = 0;                 // forward this signal to the ranks
  bool terminate = false;          // SIGTERM the ranks (their emergency checkpoint)
  bool kill = false;               // SIGKILL everything
};

class AttemptWatch {
 public:
  AttemptWatch(WatchConfig config, Senses senses, int attempt, double started);

  // One round of the loop at wall-clock `now`: `signal` is the signal received (0: none,
  // SIGCHLD counts as none) and `task_failed` whether srun has reported a failed task.
  Orders tick(double now, int signal, bool task_failed);

  // What happened, for classification and the recovery breakdown.
  int preempt_signal() const { return preempt_signal_; }
  const std::string& stopped_why() const { return stopped_why_; }  // --timeout or a hung rank
  const std::vector<std::string>& lost() const { return lost_; }
  bool grow_requested() const { return grow_since_ > 0; }
  bool grow_terminated() const { return grow_terminated_; }  // SIGTERM after --resize-wait
  double first_failure_at() const { return first_failure_at_; }  // srun's first task-failure line (0: none)
  double lost_found_at() const { return lost_found_at_; }        // the probe that found lost nodes (0: none)

 private:
  void probe(double now, bool task_failed, Orders& o);
  void watch_limits(double now, Orders& o);
  void watch_grow(double now, Orders& o);
  void kill(Orders& o, const std::string& line);

  WatchConfig config_;
  Senses senses_;
  int attempt_;
  double started_;
  int preempt_signal_ = 0;
  double grace_deadline_ = 0;
  std::string stopped_why_;
  bool killed_ = false;
  double next_probe_ = 0;
  int probes_ = 0;
  double next_hang_check_ = 0;
  double next_grow_check_ = 0;
  double grow_since_ = 0;
  bool grow_terminated_ = false;
  std::vector<std::string> lost_;
  double first_failure_at_ = 0;
  double lost_found_at_ = 0;
};

}  // namespace saker::run
