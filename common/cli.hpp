// The command-line contract every saker-* tool shares (saker(7)): subcommands, options,
// `--help` per subcommand, "did you mean" for unknown commands and options, one table of
// exit codes. Tools keep their own logic; this is only their front end.
//
// Why not Boost.Program_options: it guesses abbreviations (`--max-restart 2` became
// "the required argument for option '--max-restarts' is missing"), treats `cmd --help`
// as valid for unknown commands, and cannot say which command an option belongs to.
// Kept apart from libsaker_common so that the plugins never link it.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace saker::cli {

// The exit codes of saker(7), the same for every tool.
enum ExitCode : int {
  kOk = 0,
  kFailed = 1,      // the work failed (denied, tampered, a step failed after its restarts)
  kUsage = 2,       // bad command line: nothing was done
  kUnusable = 3,    // an input cannot be used: missing, unreadable, not the right format
  kConflict = 4,    // the state on disk belongs to something else, or is in use
  kPreempted = 75,  // stopped by a signal after saving what can be resumed
  kRefused = 78,    // refused by policy or settings; retrying will not help
  kDamaged = 79,    // every checkpoint is damaged
  kCannotExec = 127,
};

// Every error line of every tool starts so (saker(7)), then names the tool and command:
// "saker: error: saker-policy explain: --policy is missing (fix: ...)".
inline constexpr const char* kErrorPrefix = "saker: error: ";

struct Option {
  std::string name;          // without "--"
  std::string value;         // the value's name in help; "" for a switch
  std::string help;
  bool repeatable = false;   // may be given more than once (values kept in order)
  char letter = 0;           // a one-letter alias ('n': -n 4 or -n4), as srun's; 0 for none
  bool hidden = false;       // internal (saker-run's --exec-rank): accepted, never shown or suggested
};

struct Command {
  std::string name;          // "check", or two words: "audit verify"
  std::string synopsis;      // what follows the name in usage, e.g. "FILE [--last N]"
  std::string what;          // one line: what it does
  std::vector<Option> options;
  std::size_t min_args = 0;  // positional arguments accepted
  std::size_t max_args = 0;
  std::string args_name;     // what a positional argument is ("POLICY file"), for errors
  // The first positional argument ends the options: it and every word after it are a
  // program's command line, kept as they are (saker-run PROGRAM ARGS, as srun and torchrun).
  bool program_args = false;
};

struct Tool {
  std::string name;          // "saker-policy"
  std::string what;          // one line for the top of --help
  std::vector<Command> commands;
  std::string footer;        // after the command list (exit codes, see also)
};

// A command line that cannot be run: exit kUsage with this message.
struct UsageError : saker::Error {
  using saker::Error::Error;
};

// An error with its exit code, for `run` to throw: printed after kErrorPrefix, and after
// the tool's and command's names unless it starts with the tool's name itself.
struct Failure : saker::Error {
  Failure(int exit_code, const std::string& message) : saker::Error(message), code(exit_code) {}
  int code;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // a switch as {""}
  bool help = false;
  std::map<std::string, std::string> spelled;  // how an option was written ("-n"), for messages

  bool has(const std::string& name) const { return values.count(name) != 0; }
  // The option's value, or `fallback` when it was not given.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // A number (decimal or exponent form) in [min, max] (max may be infinity: "min or more");
  // a UsageError naming the option otherwise.
  double real(const std::string& name, double fallback, double min, double max) const;
  // The value of an option the command cannot do without; a UsageError naming it otherwise.
  std::string required(const std::string& name) const;
  const std::vector<std::string>& all(const std::string& name) const;
  // A whole number in [min, max]; a UsageError naming the option otherwise.
  std::uint64_t number(const std::string& name, std::uint64_t fallback, std::uint64_t min = 0,
                       std::uint64_t max = UINT64_MAX) const;

  std::string command;  // for messages: "saker-policy audit show"

 private:
  std::string spelling(const std::string& name) const;  // "-n" if so written, else "--ntasks"
};

// The candidate `typed` most probably meant: one it abbreviates, or one within a few
// typos; "" when none is close.
std::string closest(const std::string& typed, const std::vector<std::string>& candidates);

std::string usage(const Tool& tool);
std::string usage(const Tool& tool, const Command& command);

// The command `words` starts with (one or two words); sets *used to how many it took.
// UsageError for an unknown one, with a "did you mean".
const Command& find_command(const Tool& tool, const std::vector<std::string>& words, std::size_t* used);

// Options anywhere (--name VALUE, --name=VALUE, and -x VALUE or -xVALUE for an option with a
// letter), `--` ends them, and so does the first positional argument of a Command with
// program_args. UsageError for an unknown, repeated or valueless option and for a wrong
// number of positional arguments.
Args parse(const Tool& tool, const Command& command, const std::vector<std::string>& words);

// A tool's main(): --version, --help, no arguments (usage, exit 2), the command, its --help,
// then `run`. UsageError → exit 2 with the message and the command's usage line; Failure →
// its code; any other exception escaping `run` → exit 1 with its message. `words` excludes argv[0].
using Runner = std::function<int(const Command&, const Args&)>;
int main(const Tool& tool, const std::vector<std::string>& words, const Runner& run, std::ostream& out,
         std::ostream& err);
int main(const Tool& tool, int argc, char** argv, const Runner& run, std::ostream& out, std::ostream& err);

}  // namespace saker::cli
