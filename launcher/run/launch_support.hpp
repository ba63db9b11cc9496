// The checks and Slurm actions saker-run's supervisor (supervise.cpp) takes around its
// attempts; defined in launcher.cpp.
#pragma once

#include <string>

#include "launcher/run/process.hpp"

namespace saker::run {

std::string env_or(const char* name, const std::string& fallback);

// Refuses MASTER_PORT when something listens there before the ranks start (saker-run(1)).
void refuse_taken_master_port(const std::string& address, int port);

// `scontrol requeue` of this job (its array task alone in a job array); logs a failure.
bool requeue_job(const std::string& job_id);

// Refuses to run inside a job step (a nested srun would wait forever).
void refuse_inside_step();

// Why argv[0] cannot be executed here ("it is a directory", ...; PATH searched as execvp
// does), or "" when it can.
std::string why_not_executable(const std::string& program);
inline bool executable(const std::string& program) { return why_not_executable(program).empty(); }

// After a failed attempt inside Slurm with lost nodes: wait for them to answer again (true),
// for Slurm to end the run (a signal), or `limit_s`.
bool wait_out_lost_nodes(SignalWatcher& signals, const std::string& nodelist, double limit_s);

}  // namespace saker::run
