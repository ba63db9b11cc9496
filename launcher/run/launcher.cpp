#include "launcher/run/launcher.hpp"

#include <signal.h>
#include <slurm/slurm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/reserved_port.hpp"
#include "common/shm_names.hpp"
#include "common/slurm_compat.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/run/node_loss.hpp"
#include "launcher/run/node_probe.hpp"
#include "launcher/run/process.hpp"
#include "launcher/run/rank_env.hpp"
#include "launcher/run/runtime_dir.hpp"
#include "launcher/run/step.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

void say(const std::string& line) { log::info("saker-run: " + line); }

// MASTER_PORT serves torch's own TCPStore, which Saker cannot authenticate. Holding the
// port (ReservedPort) keeps the kernel from handing it out, but another user's listener
// with SO_REUSEADDR may still bind it (Linux checks no owner there), and a fixed
// --master-port can be taken before saker-run starts. A port that accepts connections
// before the ranks start is such a listener: refuse the attempt rather than let the ranks
// talk to it (saker-run(1), MASTER_PORT).
void refuse_taken_master_port(const std::string& address, int port) {
  if (!tcp_reachable(address, port, 500)) return;
  throw Error(explain("MASTER_PORT " + std::to_string(port) + " on " + address +
                          " accepts connections before the ranks have started",
                      "another program listens there, perhaps another user's; torch.distributed's ranks would "
                      "reach it instead of rank 0's store",
                      "leave out --master-port (saker-run then holds a fresh port for each attempt) or pick a "
                      "free one; see MASTER_PORT in saker-run(1)"));
}

// The id scontrol requeues exactly this job by. One task of every job array has a job id
// equal to the array's id, and `scontrol requeue ARRAY_ID` requeues every task of the
// array; ARRAY_ID_TASK names the task alone.
std::string requeue_target(const std::string& job_id) {
  const std::string array = env_or("SLURM_ARRAY_JOB_ID", ""), task = env_or("SLURM_ARRAY_TASK_ID", "");
  return !array.empty() && !task.empty() ? array + "_" + task : job_id;
}

bool requeue_job(const std::string& job_id) {
  const std::string cmd = "scontrol requeue " + requeue_target(job_id);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    log::error("saker-run: `" + cmd + "` failed (" + describe_wait_status(rc) +
               "); the job is not requeued: submit it with --requeue and check JobRequeue in slurm.conf");
    return false;
  }
  return true;
}

Outcome classify(const StepResult& r, int preempt_signal, bool marker, const std::string& stopped_why,
                 std::string* detail) {
  if (r.all_ok && preempt_signal == 0 && stopped_why.empty()) {
    *detail = "";
    return Outcome::success;
  }
  // saker-run stopped the attempt itself (--timeout, a hung rank): a failure, even when
  // the ranks used the grace period to checkpoint and exit with the preempted code.
  if (!stopped_why.empty()) {
    *detail = stopped_why;
    return Outcome::timed_out;
  }
  if (preempt_signal != 0 || marker || r.all_preempted) {
    *detail = preempt_signal != 0 ? std::string("SIG") + sigabbrev_np(preempt_signal) + " received"
                                  : "ranks took an emergency checkpoint";
    if (marker) {
      *detail += ", emergency checkpoint committed";
    } else if (preempt_signal != 0 && !r.all_preempted) {
      // The message announced an emergency checkpoint; say when the ranks reported none.
      *detail += ", no emergency checkpoint reported (" + (r.detail.empty() ? "the ranks did not exit 75" : r.detail) + ")";
    }
    return Outcome::preempted;
  }
  *detail = r.detail;
  return Outcome::failed;
}

// Slurm's pseudo step ids (batch script, extern, interactive) are >= this; a real step
// (srun) has a smaller SLURM_STEP_ID.
constexpr unsigned long kFirstPseudoStepId = 0xfffffff0UL;

// Inside `srun ... saker-run`, saker-run's own srun would wait forever for resources the
// enclosing step holds ("step creation temporarily disabled"). Say so instead.
void refuse_inside_step() {
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr || *step == '\0') return;
  char* end = nullptr;
  const unsigned long id = std::strtoul(step, &end, 10);
  if (*end != '\0' || id >= kFirstPseudoStepId) return;
  throw Error(explain("saker-run is running inside job step " + env_or("SLURM_JOB_ID", "?") + "." + step +
                          " (started by srun)",
                      "saker-run starts the step itself with srun; a nested srun would wait for the CPUs "
                      "the enclosing step holds",
                      "run saker-run once from the batch script or salloc shell, not under srun "
                      "(sbatch -N2 --wrap 'saker-run -- PROG'), or use saker-run --local -n N inside the step"));
}

// Whether argv[0] can be executed here (PATH search as execvp does): a missing program
// fails every attempt the same way, so it is refused before the first one.
bool executable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const std::string path = env_or("PATH", "/usr/bin:/bin");
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    const std::string dir = colon > pos ? path.substr(pos, colon - pos) : ".";
    const std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) return true;
    pos = colon + 1;
  }
  return false;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
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
  if (in_slurm) refuse_inside_step();
  // Every RPC below (node addresses, signals, requeue) needs libslurm initialized.
  if (in_slurm) slurm_compat::client_init();
  if (!executable(o.program.front())) {
    log::error("saker-run: " + explain("cannot execute " + o.program.front(),
                                       "it is not an executable file (nor found in PATH)",
                                       "check the path and its permissions; nothing was started or restarted"));
    return kExitExec;
  }
  const std::string job_id = env_or("SLURM_JOB_ID", "");
  const std::string master_addr = in_slurm ? first_node_address(env_or("SLURM_JOB_NODELIST", "")) : "127.0.0.1";
  const std::unique_ptr<Step> step =
      in_slurm ? make_srun_step(o.srun_args, self, o.program) : make_local_step(o.ntasks, o.program);
  if (!o.ckpt_dir.empty()) create_dir_private(o.ckpt_dir);
  // Each attempt's heartbeats and preempt marker live in a private directory of its own
  // (runtime_dir.hpp): beside the checkpoints (shared by every node on a real cluster),
  // else in TMPDIR (seen by the ranks on this node).
  const std::string runtime_base = !o.ckpt_dir.empty() ? o.ckpt_dir : env_or("TMPDIR", "/tmp");
  if (!o.dry_run) check_parent_dir(runtime_base);
  const Env transit = transit_env(o.transit, env_or(kTransitEnv, ""));
  if (transit.count(kTransitEnv) != 0 && transit.at(kTransitEnv) == "off") {
    log::warn("saker-run: transit is off: the ranks' links are not authenticated and any user on the nodes or "
              "the network can read, inject into or take over them; use it for benchmarks only");
  }

  Policy policy{o.max_restarts, in_slurm && o.requeue, !o.ckpt_dir.empty(), o.own_checkpoints};
  const std::string run_id = in_slurm ? job_id : "local-" + std::to_string(::getpid());
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
    const RunDir run_dir(runtime_base, env_or("SLURM_JOB_ID", "local"), attempt.number);
    const std::string& heartbeat_dir = run_dir.heartbeat_dir();
    // Held until this attempt ends, so nothing else takes the port before rank 0 listens.
    std::optional<ReservedPort> master_port;
    if (o.master_port == 0) master_port.emplace();
    Env env = rendezvous_env(master_addr, master_port ? master_port->port() : o.master_port);
    refuse_taken_master_port(master_addr, master_port ? master_port->port() : o.master_port);
    env[kAttemptEnv] = std::to_string(attempt.number);
    env[kPreemptMarkerEnv] = run_dir.preempt_marker();
    env[kCkptNoteEnv] = run_dir.checkpoint_note();
    // A fresh secret for every attempt (never in argv or a log): the ranks authenticate each
    // other with it; srun carries it to them in Slurm's launch request.
    for (auto& [k, v] : job_key_env()) env[k] = v;
    for (auto& [k, v] : transit) env[k] = v;
    if (!o.ckpt_dir.empty()) env[kCkptDirEnv] = o.ckpt_dir;
    for (auto& [k, v] : elastic_env(restarts, o.max_restarts, run_id)) env[k] = v;
    if (o.hang_timeout_s > 0) env[kHeartbeatDirEnv] = heartbeat_dir;
    const double started = wall_clock();
    std::printf("saker-run: attempt %d starting at %.3f (%s)\n", attempt.number, started,
                in_slurm ? ("job " + job_id + ", restart count " + restarts_by_slurm).c_str()
                         : (std::to_string(o.ntasks) + " local ranks").c_str());
    std::fflush(stdout);
    step->start(env, signals.original_mask());

    int preempt_signal = 0;
    double grace_deadline = 0;
    std::string stopped_why;  // saker-run stops the attempt: --timeout or a hung rank
    double next_heartbeat_check = started + 1;
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
      if (!killed && !stopped_why.empty() && now > grace_deadline) {
        say("attempt " + std::to_string(attempt.number) + ": the ranks still run " + seconds_text(o.grace_s) +
            " s (--grace) after SIGTERM: killing them (SIGKILL)");
        step->kill_all();
        killed = true;
      }
      if (stopped_why.empty() && preempt_signal == 0 && !killed) {
        if (o.timeout_s > 0 && now - started > o.timeout_s) {
          stopped_why = "ran past --timeout " + seconds_text(o.timeout_s) + " s";
        } else if (o.hang_timeout_s > 0 && now >= next_heartbeat_check) {
          next_heartbeat_check = now + 1;
          if (const auto stale = stale_heartbeat(heartbeat_dir, now, o.hang_timeout_s)) {
            stopped_why = "rank " + std::to_string(stale->rank) + " made no progress for " +
                          seconds_text(static_cast<int>(stale->silent_s)) + " s (heartbeat " + heartbeat_dir +
                          "/rank-" + std::to_string(stale->rank) + " unchanged; --hang-timeout " +
                          seconds_text(o.hang_timeout_s) + " s)";
          }
        }
        if (!stopped_why.empty()) {
          grace_deadline = now + o.grace_s;
          say("attempt " + std::to_string(attempt.number) + " " + stopped_why + ": sending SIGTERM, then SIGKILL after " +
              seconds_text(o.grace_s) + " s (--grace)");
          step->terminate();
        }
      }
    }
    attempt.seconds = wall_clock() - started;
    // A rank killed between creating its shared-memory segment and its node's ranks
    // mapping it leaves the name in this node's /dev/shm; the user's next communicator
    // would sweep it, but after the last attempt there is none (saker-comm(3)).
    if (const int swept = shm_names::sweep_stale(); swept > 0)
      say("removed " + std::to_string(swept) + " shared-memory segment(s) that killed ranks left in /dev/shm");
    const bool marker_seen = run_dir.preempt_marker_set();
    // A program that keeps its own checkpoints may say where (SAKER_RUN_CKPT_NOTE); the
    // last directory named holds across attempts that name none.
    if (std::string named = run_dir.checkpoint_note_dir(); !named.empty()) policy.program_ckpt_dir = std::move(named);
    attempt.outcome = classify(step->result(), preempt_signal, marker_seen, stopped_why, &attempt.detail);
    attempt.interrupted = attempt.outcome == Outcome::preempted && preempt_signal == SIGINT;
    attempt.checkpointed = attempt.outcome == Outcome::preempted && (marker_seen || step->result().all_preempted);
    attempt.refused = step->result().refused;
    attempt.refused_code = step->result().refused_code;
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
        if (attempt.outcome == Outcome::preempted) return kExitPreempted;
        // A refusal keeps its meaning (saker(7)): 2 usage, 78 refused settings, 127 cannot execute.
        if (attempt.outcome == Outcome::failed && attempt.refused) {
          return attempt.refused_code == 126 ? kExitExec : attempt.refused_code;
        }
        return kExitStepFailed;
    }
  }
}

}  // namespace saker::run
