#include "launcher/run/supervise.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/reserved_port.hpp"
#include "common/shm_names.hpp"
#include "common/slurm_compat.hpp"
#include "common/utc_time.hpp"
#include "launcher/run/attempt_watch.hpp"
#include "launcher/run/launch_support.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/node_loss.hpp"
#include "launcher/run/node_probe.hpp"

namespace saker::run {
namespace {


void say(const std::string& line) { log::info("saker-run: " + line); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

// What one attempt leaves behind for classify and decide.
struct Supervisor::AttemptRun {
  int preempt_signal = 0;
  std::string stopped_why;
  std::vector<std::string> lost;
  bool grow_requested = false, grow_terminated = false;
  double failure_seen = 0, verdict = 0, ended = 0;
};

Supervisor::Supervisor(const RunOptions& options, std::string self)
    : o_(options), self_(std::move(self)), hang_(options.hang_timeout_s) {}

// The checks before the first attempt; an exit code when saker-run stops here.
std::optional<int> Supervisor::prepare() {
  in_slurm_ = !o_.local && std::getenv("SLURM_JOB_ID") != nullptr;
  if (!o_.local && !in_slurm_) {
    throw Error(explain("saker-run is not inside a Slurm job", "SLURM_JOB_ID is not set",
                        "submit it in an sbatch script, or run saker-run --local -n N"));
  }
  if (in_slurm_) refuse_inside_step();
  // Every RPC below (node addresses, signals, requeue) needs libslurm initialized.
  if (in_slurm_) slurm_compat::client_init();
  if (const std::string why = why_not_executable(o_.program.front()); !why.empty()) {
    log::error("saker-run: " + explain("cannot execute " + o_.program.front(), why,
                                       "check the path and its permissions; nothing was started or restarted"));
    return kExitExec;
  }
  job_id_ = env_or("SLURM_JOB_ID", "");
  master_addr_ = in_slurm_ ? first_node_address(env_or("SLURM_JOB_NODELIST", "")) : "127.0.0.1";
  step_ = in_slurm_ ? make_srun_step(o_.srun_args, self_, o_.program) : make_local_step(o_.ntasks, o_.program);
  if (!o_.ckpt_dir.empty()) create_dir_private(o_.ckpt_dir);
  // Each attempt's heartbeats and preempt marker live in a private directory of its own
  // (runtime_dir.hpp): beside the checkpoints (shared by every node on a real cluster),
  // else in TMPDIR (seen by the ranks on this node).
  runtime_base_ = !o_.ckpt_dir.empty() ? o_.ckpt_dir : env_or("TMPDIR", "/tmp");
  if (!o_.dry_run) check_parent_dir(runtime_base_);
  transit_ = transit_env(o_.transit, env_or(kTransitEnv, ""));
  if (transit_.count(kTransitEnv) != 0 && transit_.at(kTransitEnv) == "off") {
    log::warn("saker-run: transit is off: the ranks' links are not authenticated and any user on the nodes or "
              "the network can read, inject into or take over them; use it for benchmarks only");
  }
  policy_ = Policy{o_.max_restarts, in_slurm_ && o_.requeue, !o_.ckpt_dir.empty(), o_.own_checkpoints};
  run_id_ = in_slurm_ ? job_id_ : "local-" + std::to_string(::getpid());
  restarts_by_slurm_ = env_or("SLURM_RESTART_COUNT", "0");
  if (restarts_by_slurm_ != "0") {
    say("job " + job_id_ + " was requeued " + restarts_by_slurm_ + " time(s) by Slurm; resuming from the latest checkpoint" +
        (o_.ckpt_dir.empty() ? "" : " in " + o_.ckpt_dir));
  }
  if (in_slurm_) {
    if (const auto refused = elastic_setup()) return refused;
  }
  if (o_.dry_run) {
    const auto cmd = in_slurm_ ? srun_command(o_.srun_args, self_, o_.program) : o_.program;
    std::string line;
    for (const auto& a : cmd) line += a + " ";
    std::printf("%s\nMASTER_ADDR=%s\n", line.c_str(), master_addr_.c_str());
    return kExitOk;
  }
  return std::nullopt;
}

// The allocation's nodes and tasks, and the --nodes bounds resolved against them; exit 2
// (usage) when MIN is more nodes than the job has.
std::optional<int> Supervisor::elastic_setup() {
  placement_.nodes = hostlist::expand(env_or("SLURM_JOB_NODELIST", ""));
  original_nodes_ = static_cast<unsigned>(placement_.nodes.size());
  const int nodes = static_cast<int>(placement_.nodes.size());
  const int ntasks = std::atoi(env_or("SLURM_NTASKS", std::to_string(nodes)).c_str());
  placement_.tasks_per_node = even_tasks_per_node(ntasks, nodes);
  range_ = o_.nodes.given() ? o_.nodes : NodeRange{nodes, nodes};
  if (range_.min > nodes) {
    log::error("saker-run: " + explain("--nodes " + std::to_string(range_.min) + ":" + std::to_string(range_.max),
                                       "job " + job_id_ + " has " + std::to_string(nodes) + " node(s), fewer than MIN " +
                                           std::to_string(range_.min),
                                       "ask sbatch for at least MIN nodes, or lower MIN; nothing was started"));
    return kExitUsage;
  }
  elastic_ = placement_.tasks_per_node > 0 && range_.min < range_.max;
  expander_ = std::make_unique<Expander>(job_id_);
  if (o_.nodes.given()) {
    say("elastic run: --nodes " + std::to_string(range_.min) + ":" + std::to_string(range_.max) + ", " +
        std::to_string(nodes) + " node(s) now, --on-node-loss=" + node_loss_name(o_.on_node_loss) +
        (placement_.tasks_per_node > 0 ? "" : " (the tasks are not spread evenly over the nodes: no resizing)"));
  }
  return std::nullopt;
}

Env Supervisor::attempt_env(const RunDir& run_dir, int port, int number) {
  Env env = rendezvous_env(master_addr_, port);
  refuse_taken_master_port(master_addr_, port);
  env[kAttemptEnv] = std::to_string(number);
  env[kPreemptMarkerEnv] = run_dir.preempt_marker();
  env[kCkptNoteEnv] = run_dir.checkpoint_note();
  env[kResizeNoticeEnv] = run_dir.resize_notice();
  // A fresh secret for every attempt (never in argv or a log): the ranks authenticate each
  // other with it; srun carries it to them in Slurm's launch request.
  for (auto& [k, v] : job_key_env()) env[k] = v;
  for (auto& [k, v] : transit_) env[k] = v;
  if (!o_.ckpt_dir.empty()) env[kCkptDirEnv] = o_.ckpt_dir;
  for (auto& [k, v] : elastic_env(restarts_, o_.max_restarts, run_id_)) env[k] = v;
  // The heartbeat directory serves hang detection and the recovery breakdown.
  env[kHeartbeatDirEnv] = run_dir.heartbeat_dir();
  if (in_slurm_ && elastic_) {
    env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = std::to_string(placement_.nodes.size());
    env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = std::to_string(placement_.ntasks());
  }
  return env;
}

// A shrunk run grows back when a lost node answers again (after Slurm gave it back to the
// job through expansion) or when the allocation holds nodes the run does not use.
std::optional<std::string> Supervisor::grow_sense(const RunDir& run_dir, double now) {
  if (!elastic_ || static_cast<int>(placement_.nodes.size()) >= range_.max) return std::nullopt;
  std::vector<std::string> returned;
  if (!lost_home_.empty()) {
    const std::vector<std::string> still = unreachable_nodes(hostlist::compress(lost_home_), 500);
    for (const auto& n : lost_home_)
      if (!contains(still, n)) returned.push_back(n);
  }
  std::optional<JobView> job = load_job_view(job_id_);
  if (!job) return std::nullopt;
  for (const auto& n : returned) {
    if (!contains(job->nodes, n) && expander_->bring_back(n, *job, now)) {
      if (auto again = load_job_view(job_id_)) job = again;
    }
  }
  std::vector<std::string> ready;
  for (const auto& n : job->nodes)
    if (!contains(placement_.nodes, n) && (contains(returned, n) || !contains(lost_home_, n))) ready.push_back(n);
  const std::vector<std::string> add = grow_candidates(placement_, job->nodes, ready, range_);
  if (add.empty()) return std::nullopt;
  const Placement next = grown(placement_, add, job->nodes);
  try {
    run_dir.write_resize_notice(next.ntasks());
  } catch (const Error& e) {
    log::warn(std::string("saker-run: not growing: ") + e.what());
    return std::nullopt;
  }
  pending_grow_ = next;
  return "node(s) " + hostlist::compress(add) + " can run ranks again: growing to " + std::to_string(next.nodes.size()) +
         " nodes (" + std::to_string(next.ntasks()) + " ranks) at the ranks' next checkpoint boundary (resize notice " +
         run_dir.resize_notice() + ": " + std::to_string(next.ntasks()) + ")";
}

// What the attempt left: shared-memory leftovers swept, the ranks' marker and note read,
// and its outcome classified.
void Supervisor::finish_attempt(const RunDir& run_dir, const AttemptWatch& watch, Attempt& attempt, AttemptRun& run) {
  // A rank killed between creating its shared-memory segment and its node's ranks
  // mapping it leaves the name in this node's /dev/shm; the user's next communicator
  // would sweep it, but after the last attempt there is none (saker-comm(3)).
  if (const int swept = shm_names::sweep_stale(); swept > 0)
    say("removed " + std::to_string(swept) + " shared-memory segment(s) that killed ranks left in /dev/shm");
  const bool marker_seen = run_dir.preempt_marker_set();
  // A program that keeps its own checkpoints may say where (SAKER_RUN_CKPT_NOTE); the
  // last directory named holds across attempts that name none.
  if (std::string named = run_dir.checkpoint_note_dir(); !named.empty()) policy_.program_ckpt_dir = std::move(named);
  const StepResult r = step_->result();
  run.preempt_signal = watch.preempt_signal();
  run.stopped_why = watch.stopped_why();
  run.lost = watch.lost();
  run.grow_requested = watch.grow_requested();
  run.grow_terminated = watch.grow_terminated();
  // srun's failure line as the relay read it, else the tick that first saw it.
  run.failure_seen = step_->task_failure_at() > 0 ? step_->task_failure_at() : watch.first_failure_at();
  run.verdict = watch.lost_found_at();
  const AttemptEnd end{r.all_ok, r.all_preempted, r.detail, run.preempt_signal, marker_seen, run.stopped_why,
                       run.grow_requested, run.grow_terminated};
  attempt.outcome = classify(end, &attempt.detail);
  attempt.interrupted = attempt.outcome == Outcome::preempted && run.preempt_signal == SIGINT;
  attempt.checkpointed = attempt.outcome == Outcome::preempted && (marker_seen || r.all_preempted);
  attempt.refused = r.refused;
  attempt.refused_code = r.refused_code;
}

Attempt Supervisor::run_attempt(AttemptRun& run) {
  Attempt attempt;
  attempt.number = static_cast<int>(attempts_.size()) + 1;
  const RunDir run_dir(runtime_base_, env_or("SLURM_JOB_ID", "local"), attempt.number);
  // Held until this attempt ends, so nothing else takes the port before rank 0 listens.
  std::optional<ReservedPort> master_port;
  if (o_.master_port == 0) master_port.emplace();
  const Env env = attempt_env(run_dir, master_port ? master_port->port() : o_.master_port, attempt.number);
  const bool resized = in_slurm_ && placement_.nodes.size() != original_nodes_;
  if (in_slurm_ && elastic_) step_->place(placement_args(placement_, !lost_ever_.empty()));
  const double started = wall_clock();
  // A readable UTC time first; the epoch seconds after it for scripts that measure.
  std::printf("saker-run: attempt %d starting at %s (t=%.3f, %s)\n", attempt.number, utc_iso(static_cast<std::int64_t>(started)).c_str(), started,
              in_slurm_ ? ("job " + job_id_ + ", restart count " + restarts_by_slurm_ +
                           (resized || elastic_ ? ", " + std::to_string(placement_.nodes.size()) + " nodes, " +
                                                      std::to_string(placement_.ntasks()) + " ranks" : std::string()))
                              .c_str()
                        : (std::to_string(o_.ntasks) + " local ranks").c_str());
  std::fflush(stdout);
  step_->start(env, signals_->original_mask());
  hang_.new_attempt();

  WatchConfig config{o_.grace_s, o_.timeout_s, o_.resize_wait_s, in_slurm_, hang_.enabled()};
  const std::string& hb = run_dir.heartbeat_dir();
  const std::string nodelist = in_slurm_ ? hostlist::compress(placement_.nodes) : "";
  Senses senses;
  senses.lost_nodes = [&] { return unreachable_nodes(nodelist, 1000); };
  senses.hung = [&](double now) -> std::optional<std::string> {
    hang_.observe(heartbeat_times(hb));
    const auto stale = stale_heartbeat(hb, now, hang_.limit());
    if (!stale) return std::nullopt;
    return "rank " + std::to_string(stale->rank) + " made no progress for " +
           seconds_text(static_cast<int>(stale->silent_s)) + " s (heartbeat " + hb + "/rank-" +
           std::to_string(stale->rank) + " unchanged; hang limit " + seconds_text(static_cast<int>(hang_.limit())) +
           " s, " + hang_.basis() + ")";
  };
  senses.grow = [&](double now) { return grow_sense(run_dir, now); };
  AttemptWatch watch(config, senses, attempt.number, started);
  std::optional<RecoveryTracker> tracker;
  if (recovering_) {
    recovering_->respawned = started;
    tracker.emplace(hb, in_slurm_ ? placement_.ntasks() : o_.ntasks);
  }
  while (!step_->reap()) {
    const int sig = signals_->wait(tracker ? 100 : 200);
    const double now = wall_clock();
    const Orders orders = watch.tick(now, sig, step_->task_failure_seen());
    for (const auto& line : orders.lines) say(line);
    if (orders.forward != 0) step_->forward(orders.forward);
    if (orders.terminate) step_->terminate();
    if (orders.kill) step_->kill_all();
    if (tracker && tracker->poll(*recovering_)) {
      say(breakdown_line(*recovering_));
      tracker.reset();
      recovering_.reset();
    }
  }
  run.ended = wall_clock();
  if (tracker) {  // the attempt ended before every rank's first step
    tracker->poll(*recovering_);
    if (const std::string line = breakdown_line(*recovering_); !line.empty()) say(line + " (incomplete: the attempt ended)");
    recovering_.reset();
  }
  attempt.seconds = run.ended - started;
  reap_helpers();
  finish_attempt(run_dir, watch, attempt, run);
  return attempt;
}

Decision Supervisor::decide_next(const Attempt& attempt, const AttemptRun& run) {
  std::vector<std::string> lost = run.lost;
  const bool failed = attempt.outcome == Outcome::failed || attempt.outcome == Outcome::timed_out;
  // A lost node is not the program's fault: whatever restarts are left, move the job
  // off it now. A failure with every node answering is the program's: restart in place.
  if (in_slurm_ && failed && lost.empty()) lost = unreachable_nodes(hostlist::compress(placement_.nodes), 1000);
  last_lost_ = lost;
  last_plan_ = NodePlan{};
  if (in_slurm_ && failed) last_plan_ = plan_node_loss(o_.on_node_loss, range_, placement_, lost, policy_.can_requeue);
  return decide_attempt(policy_, attempt, restarts_, last_plan_);
}

// Releases the lost nodes from the job from a helper process, so that the next attempt
// starts at once: 22.05's libslurm retries an update for 5 s while slurmctld answers
// "the DB index is being set" (always, for a job resized before, without slurmdbd).
void Supervisor::release_in_background(const std::vector<std::string>& kept) {
  std::fflush(nullptr);
  const pid_t helper = ::fork();
  if (helper == 0) {
    release_nodes(job_id_, kept, hostlist::compress(last_lost_));
    std::fflush(nullptr);
    std::_Exit(0);
  }
  if (helper < 0) {
    release_nodes(job_id_, kept, hostlist::compress(last_lost_));
    return;
  }
  helpers_.push_back(helper);
}

// Acts on `d`; an exit code when saker-run ends here.
std::optional<int> Supervisor::apply(const Decision& d, const Attempt& attempt) {
  switch (d.action) {
    case Action::finish:
      if (attempts_.size() > 1) say(summary(attempts_, d));
      return kExitOk;
    case Action::restart:
      if (in_slurm_ && !policy_.can_requeue &&
          !wait_out_lost_nodes(*signals_, hostlist::compress(placement_.nodes), 300)) {
        say(summary(attempts_, Decision{Action::give_up, "stopped: a node of the job is lost"}));
        return kExitPreempted;
      }
      ++restarts_;
      say("restart: " + d.reason);
      return std::nullopt;
    case Action::shrink: {
      say("shrink: " + d.reason);
      // The job keeps every node it has but the lost ones (a node a grow just brought
      // back stays, for the next grow).
      std::vector<std::string> kept;
      const std::optional<JobView> job = load_job_view(job_id_);
      for (const auto& n : job ? job->nodes : last_plan_.placement.nodes)
        if (!contains(last_lost_, n)) kept.push_back(n);
      release_in_background(kept);
      for (const auto& n : last_lost_) {
        if (!contains(lost_home_, n)) lost_home_.push_back(n);
        lost_ever_.push_back(n);
      }
      placement_ = last_plan_.placement;
      pending_grow_.reset();  // a loss during a grow: the grow is looked at again from here
      return std::nullopt;
    }
    case Action::grow:
      say("grow: " + d.reason);
      if (pending_grow_) {
        for (const auto& n : pending_grow_->nodes) lost_home_.erase(std::remove(lost_home_.begin(), lost_home_.end(), n), lost_home_.end());
        placement_ = *pending_grow_;
        pending_grow_.reset();
      }
      return std::nullopt;
    case Action::wait_nodes:
      say(d.reason);
      if (!wait_out_lost_nodes(*signals_, hostlist::compress(placement_.nodes), 300)) {
        say(summary(attempts_, Decision{Action::give_up, "stopped: a node of the job is lost"}));
        return kExitPreempted;
      }
      return std::nullopt;
    case Action::requeue: {
      say("requeue: " + d.reason);
      say(summary(attempts_, d));
      if (last_lost_.empty()) return requeue_job(job_id_) ? kExitPreempted : kExitLaunch;
      return evacuate_and_requeue(job_id_, hostlist::compress(placement_.nodes), last_lost_, original_nodes_)
                 ? kExitPreempted : kExitLaunch;
    }
    case Action::give_up:
      say(summary(attempts_, d));
      if (attempt.outcome == Outcome::preempted) return kExitPreempted;
      // A refusal keeps its meaning (saker(7)): 2 usage, 78 refused settings, 127 cannot execute.
      if (attempt.outcome == Outcome::failed && attempt.refused) {
        return attempt.refused_code == 126 ? kExitExec : attempt.refused_code;
      }
      return kExitStepFailed;
  }
  return kExitStepFailed;
}

void Supervisor::reap_helpers() {
  std::vector<pid_t> running;
  for (const pid_t p : helpers_) {
    int status = 0;
    if (::waitpid(p, &status, WNOHANG) == 0) running.push_back(p);
  }
  helpers_ = std::move(running);
}

int Supervisor::run() {
  if (const auto stop = prepare()) return *stop;
  signals_ = std::make_unique<SignalWatcher>(std::initializer_list<int>{SIGTERM, SIGUSR1, SIGUSR2, SIGINT});
  while (true) {
    AttemptRun run;
    Attempt attempt = run_attempt(run);
    attempts_.push_back(attempt);
    const Decision d = decide_next(attempt, run);
    if (const auto code = apply(d, attempt)) return *code;
    // The next attempt is a recovery: time it (detect, decide, then the ranks' phases).
    RecoveryMarks marks;
    marks.failure_seen = run.failure_seen > 0 ? run.failure_seen : run.ended;
    marks.verdict = run.verdict > 0 ? run.verdict : run.ended;
    recovering_ = marks;
  }
}

}  // namespace saker::run
