#include "launcher/run/launcher.hpp"

#include <signal.h>
#include <slurm/slurm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "launcher/run/node_loss.hpp"
#include "launcher/run/node_probe.hpp"
#include "launcher/run/process.hpp"
#include "launcher/run/rank_env.hpp"
#include "launcher/run/step.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

void say(const std::string& line) { log::info("saker-run: " + line); }

// Where rank 0 reports "emergency checkpoint committed" (see saker-run(1)).
std::string preempt_marker_path(const RunOptions& o) {
  const std::string dir = !o.ckpt_dir.empty() ? o.ckpt_dir : env_or("TMPDIR", "/tmp");
  return dir + "/.saker-preempted-" + env_or("SLURM_JOB_ID", "local") + "-" + std::to_string(::getpid());
}

bool requeue_job(const std::string& job_id) {
  const std::string cmd = "scontrol requeue " + job_id;
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    log::error("saker-run: `" + cmd + "` failed (" + describe_wait_status(rc) +
               "); the job is not requeued: submit it with --requeue and check JobRequeue in slurm.conf");
    return false;
  }
  return true;
}

Outcome classify(const StepResult& r, int preempt_signal, bool marker, bool timed_out, std::string* detail) {
  if (r.all_ok && preempt_signal == 0) {
    *detail = "";
    return Outcome::success;
  }
  if (preempt_signal != 0 || marker || r.all_preempted) {
    *detail = preempt_signal != 0 ? std::string("SIG") + sigabbrev_np(preempt_signal) + " received"
                                  : "ranks took an emergency checkpoint";
    if (marker) *detail += ", emergency checkpoint committed";
    return Outcome::preempted;
  }
  *detail = r.detail;
  return timed_out ? Outcome::timed_out : Outcome::failed;
}

// After a failed attempt inside Slurm: if a node of the job is lost, a restart would fail
// at once, so wait for slurmctld to requeue the job (it signals us) or for the node to
// come back. Returns true when every node answers again.
bool wait_out_lost_nodes(SignalWatcher& signals, const std::string& nodelist, double limit_s) {
  std::vector<std::string> lost = unreachable_nodes(nodelist, 1000);
  if (lost.empty()) return true;
  std::string names;
  for (const auto& n : lost) names += (names.empty() ? "" : ",") + n;
  say("node(s) " + names + " lost (slurmd does not accept connections): not spending a restart on them; "
      "waiting for Slurm to requeue the job onto healthy nodes");
  const double until = wall_clock() + limit_s;
  while (wall_clock() < until) {
    const int sig = signals.wait(2000);
    if (sig != 0 && sig != SIGCHLD) {
      say(std::string("received SIG") + sigabbrev_np(sig) + " while node(s) " + names +
          " are lost: Slurm is ending this run of the job (node failure); it resumes from the checkpoint if requeued");
      return false;
    }
    if (unreachable_nodes(nodelist, 1000).empty()) {
      say("node(s) " + names + " answer again");
      return true;
    }
  }
  say("node(s) " + names + " still lost after " + std::to_string(static_cast<int>(limit_s)) + " s");
  return false;
}

}  // namespace

std::string first_node_address(const std::string& nodelist) {
  const std::vector<std::string> hosts = hostlist::expand(nodelist);
  if (hosts.empty()) throw Error(explain("SLURM_JOB_NODELIST is empty", "the job has no nodes", "run inside sbatch/salloc"));
  node_info_msg_t* info = nullptr;
  std::string addr = hosts.front();
  if (slurm_load_node_single(&info, const_cast<char*>(hosts.front().c_str()), SHOW_ALL) == SLURM_SUCCESS &&
      info != nullptr && info->record_count > 0 && info->node_array[0].node_addr != nullptr) {
    addr = info->node_array[0].node_addr;
  }
  if (info != nullptr) slurm_free_node_info_msg(info);
  return addr;
}

void exec_rank(const RunOptions& options) {
  Env env = rank_env_from_slurm(current_environment());
  exec_with_env(options.program, env);
}

int run_supervised(const RunOptions& o, const std::string& self) {
  const bool in_slurm = !o.local && std::getenv("SLURM_JOB_ID") != nullptr;
  if (!o.local && !in_slurm) {
    throw Error(explain("saker-run is not inside a Slurm job", "SLURM_JOB_ID is not set",
                        "submit it in an sbatch script, or run saker-run --local -n N"));
  }
  const std::string job_id = env_or("SLURM_JOB_ID", "");
  const std::string master_addr = in_slurm ? first_node_address(env_or("SLURM_JOB_NODELIST", "")) : "127.0.0.1";
  const std::unique_ptr<Step> step =
      in_slurm ? make_srun_step(o.srun_args, self, o.program) : make_local_step(o.ntasks, o.program);
  if (!o.ckpt_dir.empty()) std::filesystem::create_directories(o.ckpt_dir);
  const std::string marker = preempt_marker_path(o);

  const Policy policy{o.max_restarts, in_slurm && o.requeue};
  const std::string restarts_by_slurm = env_or("SLURM_RESTART_COUNT", "0");
  if (restarts_by_slurm != "0") {
    say("job " + job_id + " was requeued " + restarts_by_slurm + " time(s) by Slurm; resuming from the latest checkpoint" +
        (o.ckpt_dir.empty() ? "" : " in " + o.ckpt_dir));
  }
  if (o.dry_run) {
    const auto cmd = in_slurm ? srun_command(o.srun_args, self, o.program) : o.program;
    std::string line;
    for (const auto& a : cmd) line += a + " ";
    std::printf("%s\nMASTER_ADDR=%s\n", line.c_str(), master_addr.c_str());
    return kExitOk;
  }

  const std::string nodelist = env_or("SLURM_JOB_NODELIST", "");
  SignalWatcher signals({SIGTERM, SIGUSR1, SIGUSR2, SIGINT});
  std::vector<Attempt> attempts;
  int restarts = 0;
  while (true) {
    Attempt attempt;
    attempt.number = static_cast<int>(attempts.size()) + 1;
    std::filesystem::remove(marker);
    Env env = rendezvous_env(master_addr, o.master_port != 0 ? o.master_port : pick_free_port());
    env[kAttemptEnv] = std::to_string(attempt.number);
    env[kPreemptMarkerEnv] = marker;
    if (!o.ckpt_dir.empty()) env[kCkptDirEnv] = o.ckpt_dir;
    const double started = wall_clock();
    std::printf("saker-run: attempt %d starting at %.3f (%s)\n", attempt.number, started,
                in_slurm ? ("job " + job_id + ", restart count " + restarts_by_slurm).c_str()
                         : (std::to_string(o.ntasks) + " local ranks").c_str());
    std::fflush(stdout);
    step->start(env, signals.original_mask());

    int preempt_signal = 0;
    double grace_deadline = 0;
    bool timed_out = false;
    bool killed = false;
    double next_probe = 0;
    int probes = 0;
    std::vector<std::string> lost;
    while (!step->reap()) {
      const int sig = signals.wait(200);
      const double now = wall_clock();
      // A task failed but srun goes on waiting: with kill-on-bad-exit it only waits that
      // long for a task on a node that no longer answers, until slurmctld declares the
      // node down (SlurmdTimeout plus a ping cycle). Probe the nodes (only now: each probe
      // is an error line in slurmd's log) and act at once when one is lost.
      if (policy.can_requeue && preempt_signal == 0 && !killed && step->task_failure_seen() && now >= next_probe) {
        // Once a second at first (a lost node is found on the first probe); later
        // every 10 s, so a step that hangs on healthy nodes does not flood slurmd's log.
        next_probe = now + (++probes <= 10 ? 1.0 : 10.0);
        lost = unreachable_nodes(nodelist, 1000);
        if (!lost.empty()) {
          say("attempt " + std::to_string(attempt.number) + " failed and node(s) " + hostlist::compress(lost) +
              " do not answer (slurmd refuses connections): stopping srun and moving the job off them "
              "instead of waiting for slurmctld to declare them down");
          step->kill_all();
          killed = true;
        }
      }
      if (sig != 0 && sig != SIGCHLD && preempt_signal == 0) {
        preempt_signal = sig;
        grace_deadline = now + o.grace_s;
        say(std::string("received SIG") + sigabbrev_np(sig) + ": forwarding it to the ranks and waiting up to " +
            std::to_string(static_cast<int>(o.grace_s)) + " s for their emergency checkpoint");
        step->forward(sig);
      }
      if (!killed && preempt_signal != 0 && now > grace_deadline) {
        say("grace period over and the ranks still run: killing them; the job resumes from the last periodic checkpoint");
        step->kill_all();
        killed = true;
      }
      if (!killed && o.timeout_s > 0 && now - started > o.timeout_s) {
        say("attempt " + std::to_string(attempt.number) + " ran past --timeout " +
            std::to_string(o.timeout_s).substr(0, std::to_string(o.timeout_s).find(".") + 2) + " s: killing it");
        step->kill_all();
        killed = timed_out = true;
      }
    }
    attempt.seconds = wall_clock() - started;
    const bool marker_seen = std::filesystem::exists(marker);
    std::filesystem::remove(marker);
    attempt.outcome = classify(step->result(), preempt_signal, marker_seen, timed_out, &attempt.detail);
    attempt.refused = step->result().refused;
    attempts.push_back(attempt);

    // A lost node is not the program's fault: whatever restarts are left, move the job
    // off it now. A failure with every node answering is the program's: restart in place.
    const bool failed = attempt.outcome == Outcome::failed || attempt.outcome == Outcome::timed_out;
    if (policy.can_requeue && failed && lost.empty()) lost = unreachable_nodes(nodelist, 1000);
    if (policy.can_requeue && failed && !lost.empty()) {
      const std::string names = hostlist::compress(lost);
      say("requeue: attempt " + std::to_string(attempt.number) + " failed (" + attempt.detail + ") and node(s) " +
          names + " of the job are lost: a restart in place would fail too");
      say(summary(attempts, Decision{Action::requeue, "requeued off the lost node(s) " + names}));
      return evacuate_and_requeue(job_id, nodelist, lost) ? kExitPreempted : kExitLaunch;
    }
    const Decision d = decide(policy, attempt, restarts);
    switch (d.action) {
      case Action::finish:
        if (attempts.size() > 1) say(summary(attempts, d));
        return kExitOk;
      case Action::restart:
        if (in_slurm && !policy.can_requeue && !wait_out_lost_nodes(signals, nodelist, 300)) {
          say(summary(attempts, Decision{Action::give_up, "stopped: a node of the job is lost"}));
          return kExitPreempted;
        }
        ++restarts;
        say("restart: " + d.reason);
        continue;
      case Action::requeue:
        say("requeue: " + d.reason);
        say(summary(attempts, d));
        return requeue_job(job_id) ? kExitPreempted : kExitLaunch;
      case Action::give_up:
        say(summary(attempts, d));
        return attempt.outcome == Outcome::preempted ? kExitPreempted : kExitStepFailed;
    }
  }
}

}  // namespace saker::run
