#include "sweep/worker.hpp"

#include <optional>
#include <ostream>

#include "common/error.hpp"
#include "sweep/decide.hpp"
#include "sweep/metrics.hpp"

namespace saker::sweep {

Command trial_command_in(const Spec& spec, const Trial& trial, std::uint64_t budget, const std::filesystem::path& ckpt,
                         const std::filesystem::path& metrics) {
  std::map<std::string, std::string> values(trial.values.begin(), trial.values.end());
  values["budget"] = std::to_string(budget);
  values["ckpt_dir"] = ckpt.string();
  values["metrics"] = metrics.string();
  values["trial"] = std::to_string(trial.id);
  values["sweep"] = spec.name;
  Command c;
  c.argv = spec.command.render(values);
  c.env = {{"SAKER_CKPT_DIR", ckpt.string()},
           {"SAKER_METRICS_FILE", metrics.string()},
           {"SAKER_SWEEP", spec.name},
           {"SAKER_TRIAL", std::to_string(trial.id)},
           {"SAKER_SWEEP_BUDGET", std::to_string(budget)}};
  c.cwd = spec.base;
  return c;
}

Command trial_command(const Spec& spec, const Store& store, const Trial& trial, std::uint64_t budget) {
  return trial_command_in(spec, trial, budget, spec.lineage(trial.id), store.metrics_path(trial.id));
}

namespace {

struct Work {
  std::size_t trial;
  std::size_t rung;
  std::string how;  // "starts", "resumes", "promoted"
};

// Under the lock: the work this worker should do next, marked as its own.
std::optional<Work> claim(const Spec& spec, const Store& store, const WorkerOptions& o) {
  const auto lock = store.lock();
  auto all = store.load_all(spec.trial_count());
  std::optional<Work> w;
  for (const TrialState& t : all)  // 1. a trial this worker held when it was requeued
    if (t.state == State::running && t.owner == o.owner) w = Work{t.id, t.rung, "resumes"};
  if (!w && o.own_trial < all.size()) {  // 2. its own trial, unless finished or held by a live worker
    const TrialState& t = all[o.own_trial];
    const bool stale = t.state == State::running && owner_job(t.owner) != owner_job(o.owner);
    if (t.state == State::pending) w = Work{t.id, 0, "starts"};
    else if (t.state == State::failed || stale) w = Work{t.id, t.rung, "resumes"};
  }
  if (!w)
    if (const auto id = next_promotion(spec, all)) w = Work{*id, all[*id].rung + 1, "promoted"};
  if (!w) return w;
  TrialState& t = all[w->trial];
  t.state = State::running;
  t.owner = o.owner;
  t.rung = w->rung;
  t.reason.clear();
  ++t.runs;
  store.save(t);
  return w;
}

// Under the lock: record a finished rung and decide. Returns whether to go on.
bool record(const Spec& spec, const Store& store, std::size_t trial, std::size_t rung, std::uint64_t step, double value,
            std::ostream& out) {
  const auto lock = store.lock();
  auto all = store.load_all(spec.trial_count());
  TrialState& t = all[trial];
  t.results[rung] = {step, value};
  const Decision d = judge(spec, all, trial, rung);
  out << "saker-sweep: trial " << trial << ": " << d.why << ": ";
  if (d.verdict == Verdict::promote) {
    t.rung = rung + 1;
    out << "promoted to rung " << t.rung << " (" << spec.rungs()[t.rung] << " steps)\n";
  } else {
    t.state = d.verdict == Verdict::stop ? State::stopped : State::completed;
    t.owner.clear();
    t.reason = d.why;
    out << (d.verdict == Verdict::stop ? "stopped" : "completed") << "\n";
  }
  store.save(t);
  out.flush();
  return d.verdict == Verdict::promote;
}

void fail(const Store& store, std::size_t trial, const std::string& why, std::ostream& out) {
  const auto lock = store.lock();
  TrialState t = store.load(trial);
  t.state = State::failed;
  t.owner.clear();
  t.reason = why;
  store.save(t);
  out << "saker-sweep: trial " << trial << " failed: " << why << "\n";
  out.flush();
}

}  // namespace

int run_worker(const Spec& spec, const Store& store, const WorkerOptions& o, std::ostream& out) {
  const auto trials = make_trials(spec);
  const auto rungs = spec.rungs();
  // A signal that reached this worker (and its command) means stop: no new segment starts.
  // The trial it holds stays its own, to resume when the job runs again (or is submitted).
  const auto stopping = [&](std::size_t trial) {
    if (forwarded_signal() == 0) return false;
    out << "saker-sweep: signal " << forwarded_signal() << " received: not starting more work (trial " << trial
        << " resumes from its checkpoint when its job runs again)\n";
    return true;
  };
  while (const auto w = claim(spec, store, o)) {
    const Trial& trial = trials[w->trial];
    std::filesystem::create_directories(store.trial_dir(trial.id));
    std::filesystem::create_directories(spec.lineage(trial.id));
    out << "saker-sweep: trial " << trial.id << " (" << describe(trial) << ") " << w->how << " at rung " << w->rung
        << "; lineage " << spec.lineage(trial.id).string() << "\n";
    for (std::size_t rung = w->rung;; ++rung) {
      if (stopping(trial.id)) return kWorkerPreempted;
      const Command cmd = trial_command(spec, store, trial, rungs[rung]);
      out << "saker-sweep: trial " << trial.id << " rung " << rung << ": " << rungs[rung] << " steps: "
          << CommandTemplate::shell_line(cmd.argv) << "\n";
      out.flush();
      const int status = o.run(cmd, store.log_path(trial.id));
      if (status == kWorkerPreempted) {
        // The program checkpointed and (through saker-run) requeued the job: this worker
        // keeps the trial and resumes it when the job starts again.
        out << "saker-sweep: trial " << trial.id << " stopped for requeue (exit 75) at rung " << rung
            << "; it resumes from its checkpoint when this job runs again\n";
        return kWorkerPreempted;
      }
      if (status != 0) {
        fail(store, trial.id, "exit " + std::to_string(status) + " at rung " + std::to_string(rung) + " (see " +
                                  store.log_path(trial.id).string() + ")", out);
        return kWorkerFailed;
      }
      const Metrics m = read_metrics(store.metrics_path(trial.id));
      const auto series = m.series.find(spec.metric);
      auto v = series == m.series.end() ? std::nullopt : value_at(series->second, rungs[rung]);
      // The rung's result must come from this rung's steps, not from the one before.
      if (v && rung > 0 && v->first <= rungs[rung - 1]) v.reset();
      if (!v) {
        fail(store, trial.id, "the command exited 0 but " + store.metrics_path(trial.id).string() + " has no " +
                                  spec.metric + " after step " + (rung > 0 ? std::to_string(rungs[rung - 1]) : "0") +
                                  " and at or before step " + std::to_string(rungs[rung]) +
                                  " (the program must append 'step=N " + spec.metric + "=VALUE' lines to $SAKER_METRICS_FILE)",
             out);
        return kWorkerFailed;
      }
      if (!record(spec, store, trial.id, rung, v->first, v->second, out)) break;
    }
  }
  out << "saker-sweep: worker " << o.owner << " has no more work\n";
  return kWorkerDone;
}

}  // namespace saker::sweep
