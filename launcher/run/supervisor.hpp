// What saker-run does after each attempt of the step ends: the restart/requeue policy
// and the summary it prints. Kept free of processes and Slurm so every branch is
// unit-tested; launcher.cpp feeds it what really happened.
#pragma once

#include <string>
#include <vector>

#include "launcher/run/elastic.hpp"

namespace saker::run {

// Exit code a rank uses to say "I was asked to stop and my emergency checkpoint is
// committed; requeue me" (EX_TEMPFAIL from sysexits.h).
inline constexpr int kPreemptedExitCode = 75;
// Exit code a rank uses to say "I refuse to run with these settings; a restart would fail
// the same way" (EX_CONFIG), e.g. saker-train when the site policy refuses its checkpoint
// directory. The step is not restarted.
inline constexpr int kRefusedExitCode = 78;
// Exit code saker-train uses when every checkpoint is damaged (it names each): a restart
// would find the same files, so a person must look (or pass --allow-fresh-start).
inline constexpr int kAllDamagedExitCode = 79;
// Exit code a rank uses to say "an input or the environment is not usable" (saker(7)), e.g.
// saker-train when its --data file does not exist or is not HDF5: every restart would find
// the same file.
inline constexpr int kUnusableInputExitCode = 3;
// Exit codes no restart can change (see saker(7)): 2 bad command line (usage), 3 an input
// that is not usable, 78 refused settings, 79 every checkpoint damaged, 126 not executable,
// 127 not found. A rank that exits with one of them is not
// restarted, and saker-run exits with the same code (126 as 127).
bool is_refusal_exit_code(int code);

enum class Outcome {
  success,    // every rank exited 0
  preempted,  // a preemption signal arrived, or the ranks reported an emergency checkpoint
  failed,     // a rank exited non-zero or was killed
  timed_out,  // the attempt ran past --timeout and was killed
  resized,    // the ranks stopped for a grow (resize notice, or SIGTERM after --resize-wait)
};

struct Attempt {
  int number = 0;                  // 1-based within this saker-run invocation
  Outcome outcome = Outcome::failed;
  std::string detail;              // "rank exited with code 1", "SIGUSR1 received", ...
  bool refused = false;            // failed with a refusal code (is_refusal_exit_code)
  int refused_code = kRefusedExitCode;  // which one, when refused
  bool interrupted = false;        // preempted by SIGINT (Ctrl-C): the log says "interrupted"
  bool checkpointed = false;       // preempted and the ranks reported an emergency checkpoint
                                   // (SAKER_PREEMPT_MARKER, or every rank exited 75)
  double seconds = 0;              // wall time of the attempt
};

// finish, restart in place, go on at once on fewer nodes (shrink) or more (grow), requeue the
// job, wait for lost nodes to answer, or give up.
enum class Action { finish, restart, shrink, grow, requeue, wait_nodes, give_up };

struct Decision {
  Action action = Action::give_up;
  std::string reason;  // one line, logged verbatim
};

struct Policy {
  int max_restarts = 3;         // restarts of the step after failures (K)
  bool can_requeue = false;     // inside a Slurm batch job that may be requeued
  bool has_checkpoints = false; // --ckpt-dir given: a restart resumes from the latest checkpoint
  // --own-checkpoints (or SAKER_RUN_OWN_CHECKPOINTS=1): the program keeps checkpoints of its
  // own (e.g. a script with its own --ckpt-dir) and resumes from them. Without either,
  // saker-run cannot know whether a restart resumes, and its message does not guess.
  bool program_checkpoints = false;
  // The directory the program named in SAKER_RUN_CKPT_NOTE ("" when it named none).
  std::string program_ckpt_dir{};
};

// Decides what to do after `last`, given how many restarts were already spent.
Decision decide(const Policy& policy, const Attempt& last, int restarts_done);

// The decision after `last` when `nodes` says what its lost nodes lead to: a failed attempt
// with a node lost shrinks, requeues or waits (elastic.hpp plan_node_loss), and spends no
// restart (the program is not at fault); anything else is decide()'s.
Decision decide_attempt(const Policy& policy, const Attempt& last, int restarts_done, const NodePlan& nodes);

// What one attempt's end looked like to saker-run (filled from the step and AttemptWatch).
struct AttemptEnd {
  bool all_ok = false;         // every rank exited 0
  bool all_preempted = false;  // every rank exited 75
  std::string detail;          // the step's own account of what ended it
  int preempt_signal = 0;      // a signal saker-run received and forwarded (0: none)
  bool marker = false;         // the ranks committed an emergency checkpoint (preempt marker)
  std::string stopped_why;     // saker-run stopped the attempt (--timeout, a hung rank)
  bool grow_requested = false; // saker-run wrote the resize notice
  bool grow_terminated = false;  // ... and SIGTERMed the ranks after --resize-wait
};

// The attempt's outcome and its detail (for the summary).
Outcome classify(const AttemptEnd& end, std::string* detail);

// A short text for a waitpid() status: "exited with code 3", "killed by SIGKILL".
std::string describe_wait_status(int status);

const char* outcome_name(Outcome outcome);

// The multi-line summary printed when saker-run ends (one line per attempt).
std::string summary(const std::vector<Attempt>& attempts, const Decision& final_decision);

}  // namespace saker::run
