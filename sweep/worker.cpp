#include "sweep/worker.hpp"

#include <optional>
#include <ostream>

#include "common/error.hpp"
#include "saker/ckpt.hpp"
#include "sweep/decide.hpp"
#include "sweep/metrics.hpp"
#include "sweep/parents.hpp"

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
    else if (t.state == State::failed || t.state == State::interrupted || stale) w = Work{t.id, t.rung, "resumes"};
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
    if (d.verdict == Verdict::complete)
      out << "completed\n";
    else if (d.final)
      out << "stopped: it can no longer be one of the best " << spec.trial_count() / spec.stopping.reduction
          << " of the " << spec.trial_count() << " trials at rung " << rung << "\n";
    else  // ASHA: its checkpoint is written; a worker promotes it if later results put it in the top
      out << "waits at rung " << rung << " with its checkpoint: it goes on to rung " << rung + 1 << " ("
          << spec.rungs()[rung + 1] << " steps) if it is in the top 1/" << spec.stopping.reduction
          << " once more trials report at this rung\n";
  }
  store.save(t);
  out.flush();
  return d.verdict == Verdict::promote;
}

// Under the lock: `trial` ends as `state` (failed, interrupted) for the reason `why`.
void end(const Store& store, std::size_t trial, State state, const std::string& why) {
  const auto lock = store.lock();
  TrialState t = store.load(trial);
  t.state = state;
  t.owner.clear();
  t.reason = why;
  store.save(t);
}

void fail(const Store& store, std::size_t trial, const std::string& why, std::ostream& out) {
  end(store, trial, State::failed, why);
  out << "saker-sweep: trial " << trial << " failed: " << why << "\n";
  out.flush();
}

// "a and b", "a, b and c".
std::string and_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// Why a rung that exited 0 has no result, and the fix.
std::string no_result(const Spec& spec, const Store& store, std::size_t trial, std::size_t rung, const Metrics& m) {
  const auto rungs = spec.rungs();
  const std::string path = store.metrics_path(trial).string();
  std::string why = "the command exited 0 but " + path + " has no " + spec.metric + " after step " +
                    (rung > 0 ? std::to_string(rungs[rung - 1]) : "0") + " and at or before step " +
                    std::to_string(rungs[rung]);
  if (m.series.count(spec.metric) != 0)
    return why + " (the program must report " + spec.metric + " at the step {budget} asks it to stop at)";
  if (m.series.empty())
    return why + ": it reported no metric at all" +
           (m.problems.empty() ? std::string() : " (" + path + " " + m.problems.front() + ")") +
           " (fix: the program must append 'step=N " + spec.metric + "=VALUE' lines to $SAKER_METRICS_FILE, the "
           "command's {metrics})";
  std::vector<std::string> names;
  for (const auto& [name, _] : m.series) names.push_back(name);
  std::string file = store.read_file("file");  // the sweep file, where a job array's task read its copy
  while (!file.empty() && file.back() == '\n') file.pop_back();
  return why + ": it reported " + and_list(names) + ", never " + spec.metric + " (fix: set metric: name: in " +
         (file.empty() ? spec.file : file) + " to one of those, or make the program report " + spec.metric + ")";
}

}  // namespace

int run_worker(const Spec& spec, const Store& store, const WorkerOptions& o, std::ostream& out) {
  const auto trials = make_trials(spec);
  const auto rungs = spec.rungs();
  const bool local = !o.resume_with.empty();
  // What happens to a trial this worker holds when it stops early: a job array's task keeps
  // it, to resume when Slurm starts the task again; a local run leaves it interrupted.
  const auto interrupt = [&](std::size_t trial, std::size_t rung, const std::string& what) {
    end(store, trial, State::interrupted, what + " at rung " + std::to_string(rung));
    std::error_code ec;
    const auto list = std::filesystem::is_directory(spec.lineage(trial), ec)
                          ? saker::ckpt::list_checkpoints(spec.lineage(trial))
                          : std::vector<std::filesystem::path>{};
    out << "saker-sweep: trial " << trial << " interrupted at rung " << rung << ": " << what
        << "; its state says interrupted, and " << o.resume_with << " resumes it from the newest checkpoint of "
        << spec.lineage(trial).string()
        << (list.empty() ? std::string(" (there is none yet: from the start)")
                         : " (now " + list.back().filename().string() + ")")
        << "\n";
    out.flush();
    return kWorkerPreempted;
  };
  for (;;) {
    if (const int sig = forwarded_signal(); sig != 0) {
      out << "saker-sweep: " << signal_name(sig) << " received: not starting more work\n";
      return kWorkerPreempted;
    }
    const auto w = claim(spec, store, o);
    if (!w) break;
    const Trial& trial = trials[w->trial];
    std::filesystem::create_directories(store.trial_dir(trial.id));
    std::filesystem::create_directories(spec.lineage(trial.id));
    out << "saker-sweep: trial " << trial.id << " (" << describe(trial) << ") " << w->how << " at rung " << w->rung
        << "; lineage " << spec.lineage(trial.id).string() << "\n";
    for (std::size_t rung = w->rung;; ++rung) {
      if (const int sig = forwarded_signal(); sig != 0) {
        if (local) return interrupt(trial.id, rung, signal_name(sig) + " reached saker-sweep before the rung started");
        out << "saker-sweep: " << signal_name(sig) << " received: not starting more work (trial " << trial.id
            << " resumes from its checkpoint when its job runs again)\n";
        return kWorkerPreempted;
      }
      Command cmd = trial_command(spec, store, trial, rungs[rung]);
      add_parents(cmd, spec.lineage(trial.id));  // what this segment resumes from
      out << "saker-sweep: trial " << trial.id << " rung " << rung << ": " << rungs[rung] << " steps: "
          << CommandTemplate::shell_line(cmd.argv) << "\n";
      out.flush();
      const int status = o.run(cmd, store.log_path(trial.id));
      const int sig = forwarded_signal();
      if (local && (status == kWorkerPreempted || (sig != 0 && status != 0)))
        return interrupt(trial.id, rung,
                         (sig != 0 ? signal_name(sig) + " reached saker-sweep and the command " : "the command ") +
                             (status == kWorkerPreempted ? "exited 75 (stopped to be resumed)"
                              : status > 128 ? "ended with status " + std::to_string(status) + " (128+" +
                                                   signal_name(status - 128) + ")"
                                             : "exited " + std::to_string(status)));
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
        fail(store, trial.id, no_result(spec, store, trial.id, rung, m), out);
        return kWorkerFailed;
      }
      if (!record(spec, store, trial.id, rung, v->first, v->second, out)) break;
    }
  }
  out << "saker-sweep: worker " << o.owner << " has no more work\n";
  return kWorkerDone;
}

}  // namespace saker::sweep
