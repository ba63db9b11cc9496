#include "launcher/run/attempt_watch.hpp"

#include <signal.h>

#include <cstdio>
#include <cstring>

#include "common/hostlist.hpp"

namespace saker::run {
namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

AttemptWatch::AttemptWatch(WatchConfig config, Senses senses, int attempt, double started)
    : config_(config), senses_(std::move(senses)), attempt_(attempt), started_(started),
      next_hang_check_(started + 1), next_grow_check_(started + 2) {}

Orders AttemptWatch::tick(double now, int signal, bool task_failed) {
  Orders o;
  probe(now, task_failed, o);
  if (signal != 0 && signal != SIGCHLD && preempt_signal_ == 0) {
    preempt_signal_ = signal;
    grace_deadline_ = now + config_.grace_s;
    o.lines.push_back("received " + signal_name(signal) + ": forwarding it to the ranks and waiting up to " +
                      std::to_string(static_cast<int>(config_.grace_s)) + " s for their emergency checkpoint");
    o.forward = signal;
  }
  if (!killed_ && preempt_signal_ != 0 && now > grace_deadline_) {
    kill(o, "grace period over and the ranks still run: killing them; the job resumes from the last periodic checkpoint");
  }
  if (!killed_ && (!stopped_why_.empty() || grow_terminated_) && now > grace_deadline_) {
    kill(o, "attempt " + std::to_string(attempt_) + ": the ranks still run " + seconds_text(config_.grace_s) +
                " s (--grace) after SIGTERM: killing them (SIGKILL)");
  }
  if (stopped_why_.empty() && preempt_signal_ == 0 && !killed_) watch_limits(now, o);
  if (stopped_why_.empty() && preempt_signal_ == 0 && !killed_) watch_grow(now, o);
  return o;
}

// A task failed but srun goes on waiting: with kill-on-bad-exit it only waits that long
// for a task on a node that no longer answers, until slurmctld declares the node down
// (SlurmdTimeout plus a ping cycle). Probe the nodes (only now: each probe is an error line
// in slurmd's log) and act at once when one is lost.
void AttemptWatch::probe(double now, bool task_failed, Orders& o) {
  if (task_failed && first_failure_at_ == 0) first_failure_at_ = now;
  if (!config_.probe_nodes || preempt_signal_ != 0 || killed_ || !task_failed || now < next_probe_) return;
  if (!senses_.lost_nodes) return;
  // Once a second at first (a lost node is found on the first probe); later every 10 s,
  // so a step that hangs on healthy nodes does not flood slurmd's log.
  next_probe_ = now + (++probes_ <= 10 ? 1.0 : 10.0);
  std::vector<std::string> lost = senses_.lost_nodes();
  if (lost.empty()) return;
  lost_ = std::move(lost);
  lost_found_at_ = now;
  kill(o, "attempt " + std::to_string(attempt_) + " failed and node(s) " + hostlist::compress(lost_) +
              " do not answer (slurmd refuses connections): stopping srun and moving the job off them "
              "instead of waiting for slurmctld to declare them down");
}

void AttemptWatch::watch_limits(double now, Orders& o) {
  if (config_.timeout_s > 0 && now - started_ > config_.timeout_s) {
    stopped_why_ = "ran past --timeout " + seconds_text(config_.timeout_s) + " s";
  } else if (config_.watch_hangs && senses_.hung && now >= next_hang_check_) {
    next_hang_check_ = now + 1;
    if (auto why = senses_.hung(now)) stopped_why_ = *why;
  }
  if (stopped_why_.empty()) return;
  grace_deadline_ = now + config_.grace_s;
  o.lines.push_back("attempt " + std::to_string(attempt_) + " " + stopped_why_ + ": sending SIGTERM, then SIGKILL after " +
                    seconds_text(config_.grace_s) + " s (--grace)");
  o.terminate = true;
}

// A grow waits for the ranks to stop at their next checkpoint boundary (they read the
// resize notice and exit 75); past --resize-wait they get SIGTERM, their emergency
// checkpoint path, and the grace period as any stop.
void AttemptWatch::watch_grow(double now, Orders& o) {
  if (grow_since_ == 0) {
    if (!senses_.grow || now < next_grow_check_) return;
    next_grow_check_ = now + 2;
    if (auto line = senses_.grow(now)) {
      grow_since_ = now;
      o.lines.push_back(*line);
    }
    return;
  }
  if (grow_terminated_ || now - grow_since_ <= config_.resize_wait_s) return;
  grow_terminated_ = true;
  grace_deadline_ = now + config_.grace_s;
  o.lines.push_back("attempt " + std::to_string(attempt_) + ": the ranks did not stop at a checkpoint boundary within " +
                    seconds_text(config_.resize_wait_s) + " s (--resize-wait) of the resize notice: sending SIGTERM "
                    "(their emergency checkpoint), then SIGKILL after " + seconds_text(config_.grace_s) + " s (--grace)");
  o.terminate = true;
}

void AttemptWatch::kill(Orders& o, const std::string& line) {
  o.lines.push_back(line);
  o.kill = true;
  killed_ = true;
}

}  // namespace saker::run
