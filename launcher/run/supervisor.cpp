#include "launcher/run/supervisor.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <sstream>

namespace saker::run {
namespace {

std::string refusal_meaning(int code) {
  switch (code) {
    case 2: return "means a bad command line (usage error)";
    case kUnusableInputExitCode:
      return "means an input or the environment is not usable (e.g. a data file that does not exist or is not "
             "what the program reads)";
    case 126: return "means the program cannot be executed (not executable)";
    case 127: return "means the program cannot be executed (not found)";
    case 79: return "means every checkpoint in the checkpoint directory is damaged (the program names each file and why; resume from a good copy, or start over with --allow-fresh-start)";
    default: return "means the program refused its settings (e.g. the site policy refused the checkpoint directory)";
  }
}

// What a restart resumes from, as far as saker-run knows.
std::string restart_resumes(const Policy& policy) {
  if (policy.has_checkpoints) return " from the latest checkpoint";
  if (!policy.program_ckpt_dir.empty()) {
    return "; the program keeps its own checkpoints (in " + policy.program_ckpt_dir +
           ", it reported) and resumes from its newest";
  }
  if (policy.program_checkpoints) {
    return "; the program keeps its own checkpoints (--own-checkpoints) and resumes from its newest";
  }
  return " (saker-run has no --ckpt-dir: whether the program resumes depends on checkpoints of its own; "
         "--own-checkpoints says it keeps them)";
}

}  // namespace

bool is_refusal_exit_code(int code) {
  return code == 2 || code == kUnusableInputExitCode || code == kRefusedExitCode || code == kAllDamagedExitCode || code == 126 || code == 127;
}

Outcome classify(const AttemptEnd& r, std::string* detail) {
  if (r.all_ok && r.preempt_signal == 0 && r.stopped_why.empty()) {
    *detail = "";
    return Outcome::success;
  }
  // saker-run stopped the attempt itself (--timeout, a hung rank): a failure, even when
  // the ranks used the grace period to checkpoint and exit with the preempted code.
  if (!r.stopped_why.empty()) {
    *detail = r.stopped_why;
    return Outcome::timed_out;
  }
  // Stopped for a grow: the ranks exited 75 at a checkpoint boundary, or saker-run had to
  // SIGTERM them (then even a rank killed after --grace is saker-run's doing, not theirs).
  if (r.grow_requested && r.preempt_signal == 0 && (r.all_preempted || r.marker || r.grow_terminated)) {
    *detail = r.all_preempted || r.marker ? "the ranks stopped at a checkpoint boundary"
                                          : "SIGTERM after --resize-wait, " + r.detail;
    return Outcome::resized;
  }
  if (r.preempt_signal != 0 || r.marker || r.all_preempted) {
    *detail = r.preempt_signal != 0 ? std::string("SIG") + sigabbrev_np(r.preempt_signal) + " received"
                                    : "ranks took an emergency checkpoint";
    if (r.marker) {
      *detail += ", emergency checkpoint committed";
    } else if (r.preempt_signal != 0 && !r.all_preempted) {
      // The message announced an emergency checkpoint; say when the ranks reported none.
      *detail += ", no emergency checkpoint reported (" + (r.detail.empty() ? "the ranks did not exit 75" : r.detail) + ")";
    }
    return Outcome::preempted;
  }
  *detail = r.detail;
  return Outcome::failed;
}

Decision decide(const Policy& policy, const Attempt& last, int restarts_done) {
  switch (last.outcome) {
    case Outcome::success:
      return {Action::finish, "the step completed"};
    case Outcome::resized:
      // Not a failure: no restart is spent.
      return {Action::grow, "attempt " + std::to_string(last.number) + " stopped for the grow (" + last.detail +
                                "): the next attempt starts" + restart_resumes(policy)};
    case Outcome::preempted: {
      const std::string word = last.interrupted ? "interrupted" : "preempted";
      const std::string resume = last.checkpointed ? "from its emergency checkpoint"
                                                   : "from the checkpoints written before, if any (no emergency "
                                                     "checkpoint was reported)";
      if (policy.can_requeue) {
        return {Action::requeue, word + " (" + last.detail + "): requeueing the job to resume " + resume};
      }
      return {Action::give_up, word + " (" + last.detail + ")" +
                                   (last.interrupted ? "" : " outside a requeueable Slurm job") +
                                   ": stopping; run again to resume " + resume};
    }
    case Outcome::failed:
    case Outcome::timed_out:
      break;
  }
  const std::string what = std::string(last.outcome == Outcome::timed_out ? "timed out" : "failed") +
                           " (" + last.detail + ")";
  if (last.outcome == Outcome::failed && last.refused) {
    return {Action::give_up, "attempt " + std::to_string(last.number) + " " + what + ": exit code " +
                                 std::to_string(last.refused_code) + " " + refusal_meaning(last.refused_code) +
                                 "; not restarting (a restart would fail the same way): fix what its message names"};
  }
  if (restarts_done < policy.max_restarts) {
    return {Action::restart, "attempt " + std::to_string(last.number) + " " + what + ": restart " +
                                 std::to_string(restarts_done + 1) + " of " +
                                 std::to_string(policy.max_restarts) +
                                 restart_resumes(policy)};
  }
  return {Action::give_up, "attempt " + std::to_string(last.number) + " " + what + " and all " +
                               std::to_string(policy.max_restarts) + " restarts are spent (--max-restarts)"};
}

Decision decide_attempt(const Policy& policy, const Attempt& last, int restarts_done, const NodePlan& nodes) {
  const bool failed = last.outcome == Outcome::failed || last.outcome == Outcome::timed_out;
  if (!failed || nodes.action == NodeAction::none) return decide(policy, last, restarts_done);
  const std::string what = "attempt " + std::to_string(last.number) + " failed (" + last.detail + ") and ";
  switch (nodes.action) {
    case NodeAction::shrink:
      return {Action::shrink, what + nodes.reason + restart_resumes(policy)};
    case NodeAction::requeue:
      return {Action::requeue, what + nodes.reason + "; a restart in place would fail too"};
    case NodeAction::wait:
      return {Action::wait_nodes, what + nodes.reason};
    case NodeAction::none:
      break;
  }
  return decide(policy, last, restarts_done);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return std::string("killed by ") + (abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig));
  }
  return "stopped (status " + std::to_string(status) + ")";
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::success: return "success";
    case Outcome::preempted: return "preempted";
    case Outcome::failed: return "failed";
    case Outcome::timed_out: return "timed out";
    case Outcome::resized: return "resized";
  }
  return "?";
}

std::string summary(const std::vector<Attempt>& attempts, const Decision& final_decision) {
  std::ostringstream out;
  out << "summary: " << attempts.size() << " attempt" << (attempts.size() == 1 ? "" : "s") << "\n";
  for (const Attempt& a : attempts) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", a.seconds);
    out << "  attempt " << a.number << ": " << (a.interrupted ? "interrupted" : outcome_name(a.outcome)) << " after "
        << seconds << " s";
    if (!a.detail.empty()) out << " (" << a.detail << ")";
    out << "\n";
  }
  out << "  result: " << final_decision.reason;
  return out.str();
}

}  // namespace saker::run
