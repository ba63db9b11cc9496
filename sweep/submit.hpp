// `saker-sweep submit`: the one job array that runs a sweep's unfinished trials, through
// sbatch, so every trial passes the site's job_submit policy like any other job.
#pragma once

#include <string>
#include <vector>

#include "sweep/spec.hpp"
#include "sweep/state.hpp"

namespace saker::sweep {

// "0-3,5,9-11": the ids as Slurm's --array takes them.
std::string array_ranges(const std::vector<std::size_t>& ids);

// The trials a (re)submission must run: pending, failed, and running ones whose worker
// is gone (scancel, a controller restart). Stopped and completed trials never run again
// (ASHA may still promote a stopped one; any worker does that).
std::vector<std::size_t> unfinished(const std::vector<TrialState>& states);

// The batch script every task runs: `exec SAKER_SWEEP trial DIR`.
std::string batch_script(const Spec& spec, const std::string& program);

// sbatch's command line for `ids` (the script last).
std::vector<std::string> sbatch_argv(const Spec& spec, const std::vector<std::size_t>& ids, const std::string& script);

}  // namespace saker::sweep
