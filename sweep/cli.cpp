// saker-sweep's front end (sweep/cli.hpp): subcommands, options, messages, exit codes.
// Every error names the thing, the reason and the fix; usage errors (an unknown command or
// option, a missing value or sweep) exit 2 and say what was probably meant.
#include "sweep/cli.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/cli.hpp"
#include "common/error.hpp"
#include "saker/ckpt.hpp"
#include "sweep/report.hpp"
#include "sweep/sweep_dir.hpp"
#include "sweep/submit.hpp"
#include "sweep/worker.hpp"

namespace fs = std::filesystem;

namespace saker::sweep {

namespace {

std::ostream* g_out = nullptr;  // run_cli's streams
std::ostream* g_err = nullptr;

// Exit codes (saker(7)) and errors that carry them: the shared front end's (common/cli.hpp).
using cli::kConflict, cli::kFailed, cli::kOk, cli::kRefused, cli::kUnusable, cli::kUsage;
using Exit = cli::Failure;
using Args = cli::Args;

// ---- The command line: subcommands and their options ------------------------------------

const char* kSweepIs = "SWEEP is a sweep file (saker-sweep.yaml(5)) or the state directory of one (its dir:).\n";

const cli::Tool& tool() {
  static const cli::Tool t{
      "saker-sweep",
      "hyperparameter sweeps as one Slurm job array, one checkpoint lineage per trial",
      {{"submit", "SWEEP [--dry-run]",
        "submit the sweep's unfinished trials as one job array (sbatch); again after scancel: resume, finished "
        "trials never rerun",
        {{"dry-run", "", "print the sbatch command instead of running it; write nothing"}}, 1, 1, "sweep"},
       {"run", "SWEEP [--dry-run]", "run the unfinished trials here, one after another, without Slurm",
        {{"dry-run", "", "list the trials it would run and their commands; write nothing"}}, 1, 1, "sweep"},
       {"status", "SWEEP", "trials: parameters, state, rung, steps, metric, checkpoint", {}, 1, 1, "sweep"},
       {"best", "SWEEP [--command]",
        "the best trial and the command that reproduces it (read-only: the command makes its own fresh lineage)",
        {{"command", "", "print only the command that reproduces it"}}, 1, 1, "sweep"},
       {"report", "SWEEP [--svg FILE] [--metric NAME] [--goal minimize|maximize]",
        "the table best first, and a metric against step as SVG",
        {{"svg", "FILE", "where to write the plot (default DIR/report.svg)"},
         {"metric", "NAME", "the metric to plot, one the trials reported (default: the sweep's)"},
         {"goal", "minimize|maximize", "which way NAME is better, for the plot's title (default: the sweep's goal "
                                       "for its metric; not said for another)"}},
        1, 1, "sweep"},
       {"trial", "DIR", "one task of the job array (the batch script runs it; not for people)", {}, 1, 1,
        "state directory"}},
      std::string(kSweepIs) +
          "\nExit codes (saker(7)): 0 done, 1 failed (a trial failed; best: no trial has a result yet),\n"
          "2 usage error, 3 the sweep file or directory cannot be read or does not load (FILE:LINE:COLUMN),\n"
          "or sbatch cannot be run, or trial outside a job array, 4 conflict: the sweep file changed since it\n"
          "first ran, its state directory or lineages are another sweep's, or its job array still runs,\n"
          "75 a trial stopped for requeue (trial), or a local run was interrupted (run: running it again\n"
          "resumes), 78 sbatch refused the job array (the site policy or an sbatch option; its message\n"
          "is shown).\n"};
  return t;
}

// The one SWEEP every command takes (the parser counted it).
const std::string& sweep_arg(const Args& a) { return a.positional.front(); }

Exit usage_error(const std::string& what, const std::string& why, const std::string& fix) {
  return Exit{kUsage, saker::explain(what, why, fix)};
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// A local run's worker: "localPID.HOST", the job part of its trials' owner.
std::string local_job() { return "local" + std::to_string(::getpid()) + "." + host_name(); }

// A trial held by a local run whose process is gone from this host (killed, or its
// terminal closed) is not running any more: it shows as interrupted, and the next run
// resumes it (claim() takes a trial held by another job's worker).
void unless_gone(TrialState& t, const std::string& sweep) {
  const std::string job = owner_job(t.owner);
  const std::size_t dot = job.find('.');
  if (t.state != State::running || job.rfind("local", 0) != 0 || dot == std::string::npos ||
      job.substr(dot + 1) != host_name())
    return;
  const std::string pid = job.substr(5, dot - 5);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return;
  if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) return;
  t.state = State::interrupted;
  t.reason = "the saker-sweep run that ran it (process " + pid + " on " + host_name() +
             ") is gone at rung " + std::to_string(t.rung) + "; saker-sweep run " + sweep + " resumes it";
}

std::vector<Row> rows(const Spec& spec, const std::string& sweep) {
  const Store store(spec.dir);
  const auto trials = make_trials(spec);
  const auto states = store.load_all(trials.size());
  std::vector<Row> out;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    Row r{trials[i], states[i], read_metrics(store.metrics_path(i)), "-"};
    unless_gone(r.state, sweep);
    std::error_code ec;
    if (fs::is_directory(spec.lineage(i), ec)) {
      const auto list = saker::ckpt::list_checkpoints(spec.lineage(i));
      if (!list.empty()) r.checkpoint = (spec.lineage(i) / list.back().filename()).string();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::size_t> by_id(std::size_t n) {
  std::vector<std::size_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

std::string summary(const std::vector<Row>& rs) {
  std::map<std::string, int> count;
  for (const Row& r : rs) ++count[state_name(r.state.state)];
  std::string s = std::to_string(rs.size()) + " trials:";
  for (State st : {State::completed, State::stopped, State::running, State::interrupted, State::pending, State::failed})
    if (count[state_name(st)] > 0) s += " " + std::to_string(count[state_name(st)]) + " " + state_name(st) + ",";
  s.pop_back();
  return s;
}

// The job array this sweep last submitted, while Slurm still has tasks of it.
std::string live_array(const Spec& spec) {
  std::istringstream jobs(Store(spec.dir).read_file("jobs"));
  std::string line, last;
  while (std::getline(jobs, line))
    if (!line.empty()) last = line.substr(0, line.find(' '));
  if (last.empty()) return "";
  const Captured q = run_captured({{"squeue", "-h", "-r", "-j", last, "-o", "%i %T"}, {}, {}});
  return q.status == 0 && !trim_end(q.out).empty() ? last : "";
}

// The trials not finished yet, read without the lock when nothing is to be written.
std::vector<std::size_t> todo_of(const Spec& spec, bool writes) {
  const Store store(spec.dir);
  if (!writes) return unfinished(store.load_all(spec.trial_count()));
  const auto lock = store.lock();
  return unfinished(store.load_all(spec.trial_count()));
}

// ---- The subcommands -----------------------------------------------------------------------

int submit(const Args& a) {
  const std::string& file = sweep_arg(a);
  const Sweep sw = load_sweep(file);
  const Spec& spec = sw.spec;
  if (const std::string job = live_array(spec); !job.empty())
    throw Exit{kConflict, saker::explain("sweep " + spec.name + "'s job array " + job + " still has tasks in Slurm",
                                         "a second array would run the same trials twice",
                                         "wait for it (squeue -r -j " + job + "), or scancel " + job +
                                             " and submit again to resume")};
  const Store store(spec.dir);
  const bool dry_run = a.has("dry-run");
  const std::vector<std::size_t> todo = todo_of(spec, !dry_run);
  if (todo.empty()) {
    (*g_out) << "saker-sweep: all " << spec.trial_count() << " trials of sweep " << spec.name
             << " are finished; nothing to submit (saker-sweep status " << file << ")\n";
    return kOk;
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string program = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "saker-sweep";
  const fs::path script = spec.dir / "trial.sbatch";
  const auto argv = sbatch_argv(spec, todo, script.string());
  if (dry_run) {
    (*g_out) << CommandTemplate::shell_line(argv) << "\n";
    return kOk;
  }
  freeze(sw);
  store.write_file("trial.sbatch", batch_script(spec, program));
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  fs::create_directories(spec.dir / "slurm");
  const Captured r = run_captured({argv, {}, {}});
  if (r.status == 127)
    throw Exit{kUnusable, saker::explain("saker-sweep: cannot run sbatch", trim_end(r.err),
                                         "install Slurm's client and put sbatch in PATH, or use saker-sweep run")};
  (*g_err) << r.err;  // the policy's notes: "partition set to ...", "feature ... added"
  if (r.status != 0)
    throw Exit{kRefused, "saker-sweep: sbatch refused sweep " + spec.name + "'s job array (exit " +
                             std::to_string(r.status) + "): " + trim_end(r.err) +
                             "; fix the sweep file's slurm: section (or the datasets) and submit again"};
  const std::string job = trim_end(r.out).substr(0, trim_end(r.out).find(';'));
  store.append_file("jobs", job + " " + std::to_string(::time(nullptr)) + " " + array_ranges(todo) + "\n");
  (*g_out) << "saker-sweep: submitted job array " << job << " for sweep " << spec.name << ": " << todo.size() << " of "
           << spec.trial_count() << " trials (" << array_ranges(todo) << ")"
           << (spec.slurm.concurrency > 0 ? ", at most " + std::to_string(spec.slurm.concurrency) + " at a time" : "")
           << "\nsaker-sweep: lineages under " << (spec.checkpoints / spec.name).string()
           << "; follow it with: saker-sweep status " << file << "\n";
  return kOk;
}

int run_here(const Args& a) {
  const Sweep sw = load_sweep(sweep_arg(a));
  const Spec& spec = sw.spec;
  const bool dry_run = a.has("dry-run");
  const std::vector<std::size_t> todo = todo_of(spec, !dry_run);
  if (dry_run) {
    const Store store(spec.dir);
    const auto trials = make_trials(spec);
    (*g_out) << "saker-sweep: would run " << todo.size() << " of " << spec.trial_count() << " trials of sweep "
             << spec.name << " here, one after another (state in " << spec.dir.string()
             << "); each trial's next rung:\n";
    for (std::size_t id : todo) {
      const TrialState t = store.load(id);
      const std::size_t rung = t.state == State::pending ? 0 : t.rung;
      (*g_out) << "trial " << id << " (" << describe(trials[id]) << ") "
               << (t.state == State::pending ? "starts" : "resumes") << " at rung " << rung << ": "
               << CommandTemplate::shell_line(trial_command(spec, store, trials[id], spec.rungs()[rung]).argv) << "\n";
    }
    return kOk;
  }
  freeze(sw);
  const Store store(spec.dir);
  (*g_out) << "saker-sweep: running " << todo.size() << " of " << spec.trial_count() << " trials of sweep " << spec.name
           << " here, one after another\n";
  const SignalScope signals;  // Ctrl-C: the trial that runs is left interrupted, no other starts
  const std::string resume = "saker-sweep run " + sweep_arg(a);
  int worst = kOk;
  const std::string job = local_job();
  for (std::size_t id : todo) {
    const int rc = run_worker(spec, store, {job + "_" + std::to_string(id), id, run_logged, resume}, *g_out);
    if (rc == kWorkerPreempted) {
      (*g_out) << "saker-sweep: stopped: " << summary(rows(spec, sweep_arg(a))) << "; " << resume << " goes on from here\n";
      return rc;
    }
    if (rc == kOk) continue;
    worst = kFailed;
    // A metric the program never reports fails every trial the same way: no other starts.
    const auto rs = rows(spec, sweep_arg(a));
    for (const Row& r : rs) {
      if (r.state.state != State::failed || r.metrics.series.empty() || r.metrics.series.count(spec.metric) != 0)
        continue;
      const auto names = reported_metrics({r});
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      (*g_out) << "saker-sweep: not starting the other trials: " << summary(rs) << "\n";
      throw Exit{kFailed, saker::explain("saker-sweep: sweep " + spec.name + "'s metric " + spec.metric +
                                             " is never reported by its program",
                                         "trial " + std::to_string(r.trial.id) + " reported " + list +
                                             ", and every other trial would fail the same way",
                                         "set metric: name: in " + sweep_arg(a) + " to one of those, then remove " +
                                             spec.dir.string() + " (or give the sweep its own dir:) to start over")};
    }
  }
  (*g_out) << "saker-sweep: " << summary(rows(spec, sweep_arg(a))) << "\n";
  return worst;
}

int trial(const Args& a) {
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* array = std::getenv("SLURM_ARRAY_JOB_ID");
  if (task == nullptr || array == nullptr)
    throw Exit{kUnusable, saker::explain("saker-sweep trial is not inside a job array task",
                                         "SLURM_ARRAY_TASK_ID or SLURM_ARRAY_JOB_ID is not set",
                                         "use saker-sweep submit (or saker-sweep run without Slurm)")};
  const Spec spec = load_sweep(sweep_arg(a)).spec;
  const std::string restarts = std::getenv("SLURM_RESTART_COUNT") != nullptr ? std::getenv("SLURM_RESTART_COUNT") : "0";
  (*g_out) << "saker-sweep: sweep " << spec.name << " task " << task << " of array " << array << " (job "
           << (std::getenv("SLURM_JOB_ID") != nullptr ? std::getenv("SLURM_JOB_ID") : "?") << ", restart count "
           << restarts << ")\n";
  const std::size_t id = std::stoul(task);
  if (id >= spec.trial_count())
    throw Exit{kUnusable, "saker-sweep: task " + std::string(task) + " has no trial (sweep " + spec.name + " has " +
                              std::to_string(spec.trial_count()) + ")"};
  const SignalScope signals;
  return run_worker(spec, Store(spec.dir), {std::string(array) + "_" + task, id, run_logged, ""}, *g_out);
}

// Read-only: the best trial, and the command that reproduces it in a fresh lineage that
// the command itself makes (the first DIR/reproduce/trial-ID.K that does not exist).
int best(const Args& a) {
  const Spec spec = load_sweep_reading(sweep_arg(a), *g_err).spec;
  const auto rs = rows(spec, sweep_arg(a));
  const auto states = states_of(rs);
  const auto b = best_trial(spec, states);
  if (!b)
    throw Exit{kFailed, saker::explain("saker-sweep: no trial of sweep " + spec.name + " has a result yet",
                                       summary(rs), "run the sweep, then ask again (saker-sweep status " + sweep_arg(a) + ")")};
  const Row& r = rs[*b];
  const auto& [rung, result] = *r.state.results.rbegin();
  fs::path repro;
  for (int k = 1;; ++k)
    if (!fs::exists(repro = spec.dir / "reproduce" / ("trial-" + std::to_string(*b) + "." + std::to_string(k)))) break;
  const Command c = trial_command_in(spec, r.trial, spec.rungs()[rung], repro / "ckpt", repro / "metrics");
  std::string line = "cd " + CommandTemplate::shell_line({spec.base.string()}) + " && mkdir -p " +
                     CommandTemplate::shell_line({(repro / "ckpt").string()}) + " && env";
  for (const auto& [k, v] : c.env) line += " " + CommandTemplate::shell_line({k + "=" + v});
  line += " " + CommandTemplate::shell_line(c.argv);
  if (a.has("command")) {
    (*g_out) << line << "\n";
    return kOk;
  }
  char head[512];
  std::snprintf(head, sizeof head, "best trial %zu of %zu (sweep %s): %s %.9g at step %llu (%s), %s\n", *b, rs.size(),
                spec.name.c_str(), spec.metric.c_str(), result.second, static_cast<unsigned long long>(result.first),
                spec.maximize ? "maximize" : "minimize", state_name(r.state.state));
  (*g_out) << head << "  " << describe(r.trial) << "\n  checkpoint: " << r.checkpoint
           << "\n  log: " << Store(spec.dir).log_path(*b).string() << "\nreproduce it from scratch (a fresh lineage, "
           << (repro / "ckpt").string() << ", which the command makes):\n  " << line << "\n";
  return kOk;
}

int report(const Args& a) {
  const Spec spec = load_sweep_reading(sweep_arg(a), *g_err).spec;
  const auto rs = rows(spec, sweep_arg(a));
  const std::string metric = a.has("metric") ? a.get("metric") : spec.metric;
  const std::vector<std::string> known = reported_metrics(rs);
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  if (metric != spec.metric && std::find(known.begin(), known.end(), metric) == known.end())
    throw Exit{kUsage, saker::explain("saker-sweep report: no trial of sweep " + spec.name + " reported " + metric,
                                      known.empty() ? "no trial has reported any metric yet"
                                                    : "their metrics files report " + list,
                                      known.empty() ? "run the sweep first, or leave out --metric"
                                                    : "--metric with one of those")};
  std::optional<bool> maximize;
  if (a.has("goal")) {
    const std::string goal = a.get("goal");
    if (goal != "minimize" && goal != "maximize")
      throw usage_error("saker-sweep report: bad --goal '" + goal + "'", "", "--goal minimize or --goal maximize");
    maximize = goal == "maximize";
    if (metric == spec.metric && *maximize != spec.maximize)
      throw usage_error("saker-sweep report: --goal " + goal + " contradicts the sweep file",
                        spec.file + " says " + metric + " is to " + (spec.maximize ? "maximize" : "minimize"),
                        "leave out --goal for the sweep's own metric");
  }
  std::string svg = a.get("svg");
  if (svg.empty()) svg = (spec.dir / "report.svg").string();
  if (std::error_code ec; fs::is_directory(svg, ec))
    throw usage_error("saker-sweep report: --svg " + svg + " is a directory", "the plot is one file",
                      "name the file, e.g. --svg " + (fs::path(svg) / "report.svg").string());
  (*g_out) << table(spec, rs, ranking(spec, states_of(rs))) << summary(rs) << "\n";
  Store(fs::path(svg).parent_path().empty() ? fs::path(".") : fs::path(svg).parent_path())
      .write_file(fs::path(svg).filename().string(), svg_plot(spec, rs, metric, maximize));
  (*g_out) << "plot: " << svg << "\n";
  return kOk;
}

int status(const Args& a) {
  const Spec spec = load_sweep_reading(sweep_arg(a), *g_err).spec;
  const auto rs = rows(spec, sweep_arg(a));
  (*g_out) << table(spec, rs, by_id(rs.size())) << summary(rs) << "\n";
  for (const Row& r : rs)
    if (r.state.state == State::failed || r.state.state == State::interrupted)
      (*g_out) << "trial " << r.trial.id << " " << state_name(r.state.state) << ": " << r.state.reason << "\n";
  return kOk;
}

int dispatch(const cli::Command& c, const Args& a) {
  if (c.name == "submit") return submit(a);
  if (c.name == "run") return run_here(a);
  if (c.name == "trial") return trial(a);
  if (c.name == "best") return best(a);
  if (c.name == "report") return report(a);
  return status(a);
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  g_out = &out;
  g_err = &err;
  return cli::main(tool(), args, [](const cli::Command& c, const Args& a) {
    try {
      return dispatch(c, a);
    } catch (const LoadError& e) {
      throw Exit{kUnusable, std::string("saker-sweep: ") + e.what()};
    } catch (const Exit&) {
      throw;
    } catch (const std::exception& e) {
      throw Exit{kFailed, std::string("saker-sweep: ") + e.what()};
    }
  }, out, err);
}

}  // namespace saker::sweep
