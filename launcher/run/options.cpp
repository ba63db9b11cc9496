#include "launcher/run/options.hpp"

#include <cstdlib>
#include <limits>

#include "common/error.hpp"
#include "launcher/run/rank_env.hpp"

namespace saker::run {
namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();
// One machine's processes: a bound that keeps -n inside an int, far above any real run.
constexpr std::uint64_t kMaxLocalRanks = 65536;

cli::UsageError usage_error(const std::string& what, const std::string& why, const std::string& fix) {
  return cli::UsageError(explain("saker-run: " + what, why, fix));
}

double hang_timeout(const cli::Args& a) {
  const std::string text = a.get("hang-timeout", "auto");
  if (text == "auto") return kHangAuto;
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(s >= 0) || s == kForever) {
    throw usage_error("--hang-timeout " + text, "it is neither auto nor a number of seconds (0 or more)",
                      "pass --hang-timeout auto, a number of seconds, or 0 to turn hang detection off");
  }
  return s;
}

// What elastic.hpp and rank_env.hpp refuse (a bad --nodes, --on-node-loss, --transit),
// as a usage error of saker-run.
template <typename F>
auto checked(F&& parse) {
  try {
    return parse();
  } catch (const cli::UsageError&) {
    throw;
  } catch (const Error& e) {
    throw cli::UsageError(std::string("saker-run: ") + e.what());
  }
}

// The options that must agree with each other.
void check_together(const RunOptions& o) {
  if (o.nodes.given() && o.local) {
    throw usage_error("--nodes with --local", "a local run has one node", "leave out --nodes, or run inside sbatch/salloc");
  }
  if (o.ntasks > 1 && !o.local) {
    throw usage_error("-n is only for --local", "inside Slurm the allocation decides the ranks",
                      "use sbatch --ntasks/--nodes, or add --local");
  }
}

}  // namespace

const cli::Tool& run_tool() {
  static const cli::Tool t{
      "saker-run",
      "launch a training program's ranks, forward preemption signals, requeue, restart failed steps",
      {{"",
        "[OPTIONS] [--] PROGRAM [ARGS...]",
        "Launches PROGRAM as the ranks of a training job (srun inside Slurm; N processes on this machine with "
        "--local -n N), exports the rank variables Saker and torch.distributed read, forwards preemption signals "
        "and Ctrl-C (emergency checkpoint), requeues, and restarts failed steps. Like srun and torchrun, option "
        "parsing stops at PROGRAM: everything after it is PROGRAM's, so `saker-run --local -n 2 train --epochs 3` "
        "works; `--` is optional.",
        {{"local", "", "run the ranks on this machine, without Slurm"},
         {"ntasks", "N", "number of ranks with --local (default 1)", false, 'n'},
         {"max-restarts", "N", "restarts of a failed step before giving up (from the latest checkpoint with --ckpt-dir; "
                               "default 3)"},
         {"ckpt-dir", "DIR", "checkpoint directory, exported as SAKER_CKPT_DIR"},
         {"own-checkpoints", "",
          "PROGRAM keeps checkpoints of its own (e.g. a script's own --ckpt-dir) and resumes from them: restart "
          "messages say so (default: $SAKER_RUN_OWN_CHECKPOINTS=1; without it or --ckpt-dir saker-run does not know "
          "whether a restart resumes)"},
         {"grace", "SECONDS",
          "seconds between SIGTERM (or a forwarded preemption signal or Ctrl-C) and SIGKILL, for the ranks' emergency "
          "checkpoint (preemption, Ctrl-C, --timeout, --hang-timeout; default 60)"},
         {"timeout", "SECONDS",
          "wall-clock seconds one attempt may run; then SIGTERM, --grace, SIGKILL, counted as failed (default 0: no "
          "limit)"},
         {"hang-timeout", "SECONDS|auto",
          "seconds a rank's heartbeat file ($SAKER_HEARTBEAT_DIR/rank-N, touched by the rank, e.g. by saker-train "
          "every step) may stay unchanged before the rank counts as hung: the attempt is stopped like --timeout and "
          "counted as failed. auto (the default): 10 times the slowest step interval seen, at least 60 s (600 s until "
          "the ranks have beaten 3 times); 0: off; ranks that never touch it are not watched"},
         {"nodes", "MIN:MAX",
          "the nodes an elastic run may go on with (N for N:N), as torchrun's --nnodes. A lost node then shrinks the run "
          "onto the survivors of the allocation while MIN remain, and it grows back up to MAX when nodes return "
          "(default: the allocation's size, so a lost node requeues the job)"},
         {"on-node-loss", "shrink|requeue|wait",
          "shrink (the default: go on at once on the surviving nodes, within --nodes; requeue below MIN), requeue "
          "(move the job off the lost node), or wait (for the node to answer again)"},
         {"resize-wait", "SECONDS",
          "seconds the ranks have to stop at their next checkpoint boundary when the run grows ($SAKER_RESIZE_NOTICE); "
          "then SIGTERM (their emergency checkpoint; default 120)"},
         {"master-port", "PORT",
          "MASTER_PORT for the ranks (default: a free port, new for each attempt, held by saker-run until the attempt "
          "ends so that no other program is given it; rank 0 binds it with SO_REUSEADDR)"},
         {"transit", "auth|encrypt|off",
          "how the ranks' links protect their bytes, exported as SAKER_COMM_TRANSIT: auth (every connection proves "
          "this attempt's key, SAKER_JOB_KEY), encrypt (also AES-256-GCM between nodes), or off (no authentication: "
          "benchmarks only). Default: SAKER_COMM_TRANSIT from the environment, else auth"},
         {"srun-arg", "ARG", "extra argument for srun (repeatable), e.g. --srun-arg=--cpu-bind=cores", true},
         {"no-requeue", "", "on preemption stop instead of running scontrol requeue"},
         {"dry-run", "", "print the launch command and MASTER_ADDR; run nothing"},
         {"exec-rank", "", "internal: set this task's rank variables and exec", false, 0, true}},
        1, std::numeric_limits<std::size_t>::max(), "PROGRAM", true}},
      "Exit codes (shared by every Saker tool, see saker(7)): 0 success, 1 step failed after all restarts, 2 usage\n"
      "error, 3 launch/requeue error (or inside a job step), or a rank's input is not usable (it exited 3), 75\n"
      "preempted or interrupted (requeued, or stopped with --local; Ctrl-C included), 78 a rank refused its\n"
      "settings, 79 every checkpoint is damaged, 127 PROGRAM cannot be executed. Final codes (a rank exiting 2, 3,\n"
      "78, 79, 126, 127) are never restarted. See saker-run(1).\n"};
  return t;
}

RunOptions run_options(const cli::Args& a) {
  RunOptions o;
  o.help = a.help;
  o.local = a.has("local");
  o.exec_rank = a.has("exec-rank");
  o.dry_run = a.has("dry-run");
  o.requeue = !a.has("no-requeue");
  const std::uint64_t ntasks = a.number("ntasks", 1, 1);
  if (ntasks > kMaxLocalRanks) {
    throw usage_error("-n " + a.get("ntasks"), "more ranks than one machine runs",
                      "pass -n 1 to " + std::to_string(kMaxLocalRanks));
  }
  o.ntasks = static_cast<int>(ntasks);
  o.max_restarts = static_cast<int>(a.number("max-restarts", 3, 0, 1000000));
  o.grace_s = a.real("grace", 60, 0, kForever);
  o.timeout_s = a.real("timeout", 0, 0, kForever);
  o.resize_wait_s = a.real("resize-wait", 120, 0, kForever);
  o.hang_timeout_s = hang_timeout(a);
  o.master_port = static_cast<int>(a.number("master-port", 0, 0, 65535));
  o.ckpt_dir = a.get("ckpt-dir");
  o.transit = a.get("transit");
  o.srun_args = a.all("srun-arg");
  o.program = a.positional;
  o.on_node_loss = checked([&] { return parse_node_loss(a.get("on-node-loss", "shrink")); });
  if (a.has("nodes")) o.nodes = checked([&] { return parse_node_range(a.get("nodes")); });
  checked([&] { return transit_env(o.transit, ""); });  // refuses a --transit other than auth, encrypt or off
  o.own_checkpoints = a.has("own-checkpoints");
  if (const char* own = std::getenv(kOwnCheckpointsEnv)) {
    const std::string v = own;
    if (v == "1" || v == "yes" || v == "true") o.own_checkpoints = true;
  }
  if (!o.help) check_together(o);
  return o;
}

RunOptions parse_run_options(int argc, const char* const* argv, std::string* help_text) {
  const cli::Tool& tool = run_tool();
  if (help_text != nullptr) *help_text = cli::usage(tool);
  return run_options(cli::parse(tool, tool.commands[0], std::vector<std::string>(argv + 1, argv + argc)));
}

}  // namespace saker::run
