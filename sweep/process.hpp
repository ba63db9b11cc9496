// Running the programs saker-sweep drives: a trial's command (its output appended to the
// trial's log, and the preemption signals the batch shell receives passed on to it) and
// sbatch/squeue (output captured).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace saker::sweep {

struct Command {
  std::vector<std::string> argv;                            // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;    // added to this environment
  std::filesystem::path cwd;                                // "" : this one
};

// Runs `cmd` with stdout and stderr appended to `log`. SIGTERM, SIGUSR1, SIGUSR2 and SIGINT
// that reach this process meanwhile are passed on to the command (`scancel -b --signal`
// reaches only the batch shell; saker-run then checkpoints and requeues). Returns the
// exit status, 128+N when it died of signal N, 127 when it could not be started.
int run_logged(const Command& cmd, const std::filesystem::path& log);
// The last of those signals that reached this process (0: none), passed on to the command
// that ran then. A signal the terminal sent (Ctrl-C) went to the whole foreground process
// group, the command included, and is not sent to it a second time.
int forwarded_signal();
// For one command of saker-sweep (run, trial): from now on those signals are caught (none
// received yet); the destructor restores their default actions and forgets the signal.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
};
// "SIGINT", "SIGTERM", ... ("signal N" for others).
std::string signal_name(int sig);

struct Captured {
  int status = 0;
  std::string out, err;
};
// Runs `cmd` and captures its output; status 127 when it could not be started.
Captured run_captured(const Command& cmd);
// `s` without its trailing newlines and spaces: a captured output, a one-line state file.
std::string trim_end(std::string s);

}  // namespace saker::sweep
