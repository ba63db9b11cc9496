// What one task of the sweep's job array does (`saker-sweep trial`): run its own trial
// rung by rung -- each rung is one run of the command with {budget} set to the rung's
// steps, resuming from the trial's own checkpoint lineage -- and after each rung record
// the metric and let the early-stopping rule decide. When its own trial is done, a worker
// takes on ASHA promotions of stopped trials (ASHA's "a free worker promotes first"), so
// a promotion never waits for a new job. Every state change happens under the sweep's
// lock; the commands run outside it.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <string>

#include "sweep/process.hpp"
#include "sweep/spec.hpp"
#include "sweep/state.hpp"
#include "sweep/trials.hpp"

namespace saker::sweep {

// Exit codes of a worker (saker(7)).
inline constexpr int kWorkerDone = 0, kWorkerFailed = 1, kWorkerPreempted = 75;

struct WorkerOptions {
  std::string owner;           // "ARRAYJOB_TASK": who holds a running trial
  std::size_t own_trial = 0;   // SLURM_ARRAY_TASK_ID
  // Runs one segment; run_logged outside tests.
  std::function<int(const Command&, const std::filesystem::path& log)> run = run_logged;
  // "": a task of a job array, which Slurm requeues after exit 75. Otherwise a local run
  // (saker-sweep run), and the command that resumes its trials: a signal, or a command that
  // stops after an emergency checkpoint (exit 75), leaves the trial interrupted.
  std::string resume_with = "";
};

// The command of `trial` for a segment of `budget` steps, with the trial's lineage and
// metrics file, its environment (SAKER_CKPT_DIR, SAKER_METRICS_FILE, SAKER_SWEEP,
// SAKER_TRIAL, SAKER_SWEEP_BUDGET) and the sweep file's folder as working directory.
Command trial_command(const Spec& spec, const Store& store, const Trial& trial, std::uint64_t budget);
// The same with the lineage and metrics file under `dir` instead (a reproduction).
Command trial_command_in(const Spec& spec, const Trial& trial, std::uint64_t budget, const std::filesystem::path& ckpt,
                         const std::filesystem::path& metrics);

// Runs until there is nothing left for this worker, or a signal arrived (forwarded_signal():
// no new segment starts; kWorkerPreempted); progress lines go to `out`.
int run_worker(const Spec& spec, const Store& store, const WorkerOptions& options, std::ostream& out);

}  // namespace saker::sweep
