// saker-run's main loop: start an attempt, watch signals and the ranks, and apply
// the restart/requeue policy until the step completes or the policy gives up.
#pragma once

#include <string>

#include "launcher/run/options.hpp"

namespace saker::run {

// Runs the job described by `options`; returns saker-run's exit code. `self` is the
// path of the saker-run binary (srun tasks re-enter it with --exec-rank).
int run_supervised(const RunOptions& options, const std::string& self);

// --exec-rank: sets this srun task's rank variables and execs the program.
[[noreturn]] void exec_rank(const RunOptions& options);

// Address ranks use to reach rank 0: the NodeAddr of the first node of the job
// (slurmctld knows it; node names need not resolve), else the name itself.
std::string first_node_address(const std::string& nodelist);

}  // namespace saker::run
