// saker-run's command line: its options on the shared front end (common/cli.hpp, saker(7)),
// checked and turned into a plain struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "launcher/run/elastic.hpp"

namespace saker::run {

// Exit codes of saker-run (saker-run(1)): saker(7)'s table, as every tool has it.
inline constexpr int kExitOk = cli::kOk;
inline constexpr int kExitStepFailed = cli::kFailed;  // the step failed and every restart is spent
inline constexpr int kExitUsage = cli::kUsage;        // bad command line
inline constexpr int kExitLaunch = cli::kUnusable;    // could not set up the launch (environment, requeue)
inline constexpr int kExitPreempted = cli::kPreempted;  // preempted: requeued, or (--local) stopped or interrupted
inline constexpr int kExitExec = cli::kCannotExec;    // the program cannot be executed (not found, not executable)

inline constexpr double kHangAuto = -1;

struct RunOptions {
  bool help = false;
  bool local = false;           // N ranks here, no Slurm
  bool exec_rank = false;       // internal: we are one srun task; set rank env and exec
  bool dry_run = false;         // print what would run
  bool requeue = true;          // requeue the job on preemption (Slurm mode)
  int ntasks = 1;               // --local only
  int max_restarts = 3;
  double grace_s = 60;          // SIGTERM (or the preemption signal) to SIGKILL: time to checkpoint
  double timeout_s = 0;         // per-attempt limit; 0 = none
  // A rank whose heartbeat is this old is hung; 0 = no hang detection; kHangAuto (the
  // default, --hang-timeout auto) = derived from the observed step time (heartbeat.hpp).
  double hang_timeout_s = -1;
  NodeRange nodes;              // --nodes MIN:MAX (not given: the allocation's size, no shrinking)
  NodeLossPolicy on_node_loss = NodeLossPolicy::shrink;  // --on-node-loss
  double resize_wait_s = 120;   // --resize-wait: the ranks' time to reach a checkpoint boundary for a grow
  int master_port = 0;          // 0 = pick a free one per attempt
  std::string ckpt_dir;
  bool own_checkpoints = false; // --own-checkpoints or SAKER_RUN_OWN_CHECKPOINTS=1: PROGRAM keeps its own
  std::string transit;          // --transit: auth|encrypt|off; empty = SAKER_COMM_TRANSIT or the default
  std::vector<std::string> srun_args;
  std::vector<std::string> program;
};

// The environment variable that says what --own-checkpoints says (1, yes or true).
inline constexpr const char* kOwnCheckpointsEnv = "SAKER_RUN_OWN_CHECKPOINTS";

// saker-run's one command: its options, PROGRAM and its arguments (cli::Command::program_args:
// option parsing stops at PROGRAM, as with srun and torchrun).
const cli::Tool& run_tool();

// The options of a parsed command line, checked together (-n only with --local, ...):
// cli::UsageError naming the option and its fix otherwise.
RunOptions run_options(const cli::Args& args);

// parse and run_options over argv (argv[0] is the program's name). `help_text`, if given,
// receives the --help text. Throws cli::UsageError (a saker::Error) on a usage error.
RunOptions parse_run_options(int argc, const char* const* argv, std::string* help_text);

}  // namespace saker::run
