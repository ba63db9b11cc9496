// saker-sweep's command line: the subcommands (submit, run, status, best, report, trial),
// their options and errors, and the exit codes of saker(7). The program itself
// (sweep/saker-sweep/main.cpp) only calls run_cli, so the unit tests drive the very same
// front end.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace saker::sweep {

// Runs `saker-sweep ARGS...` (argv without the program name): normal output to `out`,
// errors ("saker: error: ...") to `err`. Returns the exit status (saker(7)).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace saker::sweep
