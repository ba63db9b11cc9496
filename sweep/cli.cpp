// saker-sweep's front end (sweep/cli.hpp): subcommands, options, messages, exit codes.
#include "sweep/cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/log.hpp"
#include "saker/ckpt.hpp"
#include "sweep/report.hpp"
#include "sweep/submit.hpp"
#include "sweep/worker.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace saker::sweep {

namespace {

std::ostream* g_out = nullptr;  // run_cli's streams
std::ostream* g_err = nullptr;

// Exit codes (saker(7)).
constexpr int kOk = 0, kFailed = 1, kUsage = 2, kUnusable = 3, kConflict = 4, kRefused = 78;

struct Exit {
  int code;
  std::string message;
};

const char* kUsageText =
    "Usage:\n"
    "  saker-sweep submit SWEEP [--dry-run]   submit the sweep's trials as one job array (sbatch);\n"
    "                                         again after scancel: resume, finished trials never rerun\n"
    "  saker-sweep run SWEEP                  run the trials here, one after another, without Slurm\n"
    "  saker-sweep status SWEEP               trials: parameters, state, rung, steps, metric, checkpoint\n"
    "  saker-sweep best SWEEP [--command]     the best trial and the command that reproduces it\n"
    "  saker-sweep report SWEEP [--svg FILE] [--metric NAME]\n"
    "                                         the table best first, and metric against step as SVG\n"
    "  saker-sweep trial DIR                  one task of the job array (the batch script runs it)\n"
    "  saker-sweep --help | --version\n"
    "SWEEP is a sweep file (saker-sweep.yaml(5)) or the directory of a submitted sweep.\n"
    "\n"
    "Exit codes (saker(7)): 0 done, 1 failed (a trial failed; best: no trial has a result yet),\n"
    "2 usage error, 3 the sweep file or directory cannot be read or does not load (FILE:LINE:COLUMN),\n"
    "or sbatch cannot be run, or trial outside a job array, 4 conflict: the sweep file changed since it\n"
    "was submitted, or its job array still runs, 75 a trial stopped for requeue (trial, run),\n"
    "78 sbatch refused the job array (the site policy or an sbatch option; its message is shown).\n";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A sweep file, or a submitted sweep's directory (its frozen copy and origin).
Spec load(const std::string& what) {
  if (fs::is_directory(what)) {
    const fs::path copy = fs::path(what) / "sweep.yaml";
    if (!fs::exists(copy))
      throw Exit{kUnusable, "saker-sweep: " + what + " is not a sweep directory (no sweep.yaml in it); "
                            "pass the sweep file, or the dir: that saker-sweep submit filled"};
    return load_string(slurp(copy), copy.string(), trim(slurp(fs::path(what) / "origin")));
  }
  return load_file(what);
}

// Records the sweep file in its directory the first time; later, refuses a changed one.
void freeze(const Spec& spec, const std::string& file) {
  const Store store(spec.dir);
  const std::string text = slurp(file), frozen = store.read_file("sweep.yaml");
  if (!frozen.empty() && frozen != text && !fs::equivalent(file, spec.dir / "sweep.yaml"))
    throw Exit{kConflict, saker::explain("the sweep file " + file + " changed since sweep " + spec.name +
                                             " was first submitted (copy in " + (spec.dir / "sweep.yaml").string() + ")",
                                         "its trials would no longer match the ones already run",
                                         "restore the file, or give the changed sweep another name: or dir:")};
  if (frozen.empty()) {
    store.write_file("sweep.yaml", text);
    store.write_file("origin", spec.base.string() + "\n");
  }
}

std::vector<Row> rows(const Spec& spec) {
  const Store store(spec.dir);
  const auto trials = make_trials(spec);
  const auto states = store.load_all(trials.size());
  std::vector<Row> out;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    Row r{trials[i], states[i], read_metrics(store.metrics_path(i)), "-"};
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
  for (State st : {State::completed, State::stopped, State::running, State::pending, State::failed})
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
  return q.status == 0 && !trim(q.out).empty() ? last : "";
}

// Parses a subcommand's options; the one positional argument (the sweep) goes to `sweep`.
void parse(const std::vector<std::string>& args, po::options_description& o, std::string& sweep) {
  o.add_options()("sweep", po::value(&sweep)->required(), "sweep file or directory");
  po::positional_options_description pos;
  pos.add("sweep", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).positional(pos).run(), vm);
  po::notify(vm);
}

int submit(const std::vector<std::string>& args) {
  bool dry_run = false;
  std::string file;
  po::options_description o("submit options");
  o.add_options()("dry-run", po::bool_switch(&dry_run), "print the sbatch command instead of running it");
  parse(args, o, file);
  if (fs::is_directory(file)) file = (fs::path(file) / "sweep.yaml").string();
  const Spec spec = load(file);
  if (const std::string job = live_array(spec); !job.empty())
    throw Exit{kConflict, saker::explain("sweep " + spec.name + "'s job array " + job + " still has tasks in Slurm",
                                         "a second array would run the same trials twice",
                                         "wait for it (squeue -r -j " + job + "), or scancel " + job +
                                             " and submit again to resume")};
  const Store store(spec.dir);
  std::vector<std::size_t> todo;
  {
    const auto lock = store.lock();
    todo = unfinished(store.load_all(spec.trial_count()));
  }
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
  freeze(spec, file);
  store.write_file("trial.sbatch", batch_script(spec, program));
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  fs::create_directories(spec.dir / "slurm");
  const Captured r = run_captured({argv, {}, {}});
  if (r.status == 127) throw Exit{kUnusable, "saker-sweep: cannot run sbatch: " + trim(r.err) + " (is Slurm's client installed and in PATH?)"};
  (*g_err) << r.err;  // the policy's notes: "partition set to ...", "feature ... added"
  if (r.status != 0)
    throw Exit{kRefused, "saker-sweep: sbatch refused sweep " + spec.name + "'s job array (exit " +
                             std::to_string(r.status) + "): " + trim(r.err) +
                             "; fix the sweep file's slurm: section (or the datasets) and submit again"};
  const std::string job = trim(r.out).substr(0, trim(r.out).find(';'));
  store.append_file("jobs", job + " " + std::to_string(::time(nullptr)) + " " + array_ranges(todo) + "\n");
  (*g_out) << "saker-sweep: submitted job array " << job << " for sweep " << spec.name << ": " << todo.size() << " of "
            << spec.trial_count() << " trials (" << array_ranges(todo) << ")"
            << (spec.slurm.concurrency > 0 ? ", at most " + std::to_string(spec.slurm.concurrency) + " at a time" : "")
            << "\nsaker-sweep: lineages under " << (spec.checkpoints / spec.name).string() << "; follow it with: saker-sweep status "
            << file << "\n";
  return kOk;
}

int run_here(const std::string& file) {
  const Spec spec = load(file);
  if (!fs::is_directory(file)) freeze(spec, file);
  const Store store(spec.dir);
  std::vector<std::size_t> todo;
  {
    const auto lock = store.lock();
    todo = unfinished(store.load_all(spec.trial_count()));
  }
  (*g_out) << "saker-sweep: running " << todo.size() << " of " << spec.trial_count() << " trials of sweep " << spec.name
            << " here, one after another\n";
  int worst = kOk;
  const std::string job = "local" + std::to_string(::getpid());
  for (std::size_t id : todo) {
    const int rc = run_worker(spec, store, {job + "_" + std::to_string(id), id, run_logged}, (*g_out));
    if (rc == kWorkerPreempted) return rc;
    if (rc != kOk) worst = kFailed;
  }
  (*g_out) << "saker-sweep: " << summary(rows(spec)) << "\n";
  return worst;
}

int trial(const std::string& dir) {
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* array = std::getenv("SLURM_ARRAY_JOB_ID");
  if (task == nullptr || array == nullptr)
    throw Exit{kUnusable, saker::explain("saker-sweep trial is not inside a job array task",
                                         "SLURM_ARRAY_TASK_ID or SLURM_ARRAY_JOB_ID is not set",
                                         "use saker-sweep submit (or saker-sweep run without Slurm)")};
  const Spec spec = load(dir);
  const std::string restarts = std::getenv("SLURM_RESTART_COUNT") != nullptr ? std::getenv("SLURM_RESTART_COUNT") : "0";
  (*g_out) << "saker-sweep: sweep " << spec.name << " task " << task << " of array " << array << " (job "
            << (std::getenv("SLURM_JOB_ID") != nullptr ? std::getenv("SLURM_JOB_ID") : "?") << ", restart count "
            << restarts << ")\n";
  const std::size_t id = std::stoul(task);
  if (id >= spec.trial_count())
    throw Exit{kUnusable, "saker-sweep: task " + std::string(task) + " has no trial (sweep " + spec.name + " has " +
                              std::to_string(spec.trial_count()) + ")"};
  return run_worker(spec, Store(spec.dir), {std::string(array) + "_" + task, id, run_logged}, (*g_out));
}

int best(const std::vector<std::string>& args) {
  bool command_only = false;
  std::string file;
  po::options_description o("best options");
  o.add_options()("command", po::bool_switch(&command_only), "print only the command that reproduces it");
  parse(args, o, file);
  const Spec spec = load(file);
  const auto rs = rows(spec);
  const auto states = states_of(rs);
  const auto b = best_trial(spec, states);
  if (!b) throw Exit{kFailed, "saker-sweep: no trial of sweep " + spec.name + " has a result yet (saker-sweep status " + file + ")"};
  const Row& r = rs[*b];
  const auto& [rung, result] = *r.state.results.rbegin();
  // A fresh lineage, so the command trains from scratch rather than resuming the trial's.
  fs::path repro;
  for (int k = 1;; ++k)
    if (!fs::exists(repro = spec.dir / "reproduce" / ("trial-" + std::to_string(*b) + "." + std::to_string(k)))) break;
  fs::create_directories(repro);
  const Command c = trial_command_in(spec, r.trial, spec.rungs()[rung], repro / "ckpt", repro / "metrics");
  std::string line = "cd " + CommandTemplate::shell_line({spec.base.string()}) + " && env";
  for (const auto& [k, v] : c.env) line += " " + CommandTemplate::shell_line({k + "=" + v});
  line += " " + CommandTemplate::shell_line(c.argv);
  if (command_only) {
    (*g_out) << line << "\n";
    return kOk;
  }
  char head[512];
  std::snprintf(head, sizeof head, "best trial %zu of %zu (sweep %s): %s %.9g at step %llu (%s), %s\n",
                *b, rs.size(), spec.name.c_str(), spec.metric.c_str(), result.second,
                static_cast<unsigned long long>(result.first), spec.maximize ? "maximize" : "minimize",
                state_name(r.state.state));
  (*g_out) << head << "  " << describe(r.trial) << "\n  checkpoint: " << r.checkpoint << "\n  log: "
           << Store(spec.dir).log_path(*b).string() << "\nreproduce it from scratch (lineage " << (repro / "ckpt").string()
           << "):\n  " << line << "\n";
  return kOk;
}

int report(const std::vector<std::string>& args) {
  std::string file, svg, metric;
  po::options_description o("report options");
  o.add_options()("svg", po::value(&svg), "where to write the plot (default DIR/report.svg)")(
      "metric", po::value(&metric), "the metric to plot (default: the sweep's)");
  parse(args, o, file);
  const Spec spec = load(file);
  const auto rs = rows(spec);
  const auto states = states_of(rs);
  (*g_out) << table(spec, rs, ranking(spec, states)) << summary(rs) << "\n";
  if (svg.empty()) svg = (spec.dir / "report.svg").string();
  Store(fs::path(svg).parent_path().empty() ? fs::path(".") : fs::path(svg).parent_path())
      .write_file(fs::path(svg).filename().string(), svg_plot(spec, rs, metric.empty() ? spec.metric : metric));
  (*g_out) << "plot: " << svg << "\n";
  return kOk;
}

int dispatch(const std::vector<std::string>& args) {
  const bool help = std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
  if (args.empty() || help || args[0] == "help") {
    (*g_out) << kUsageText;
    return args.empty() ? kUsage : kOk;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const auto one = [&]() -> const std::string& {
    if (rest.size() != 1) throw po::error(cmd + " takes one argument, the sweep file or directory");
    return rest[0];
  };
  if (cmd == "submit") return submit(rest);
  if (cmd == "run") return run_here(one());
  if (cmd == "trial") return trial(one());
  if (cmd == "best") return best(rest);
  if (cmd == "report") return report(rest);
  if (cmd == "status") {
    const Spec spec = load(one());
    const auto rs = rows(spec);
    (*g_out) << table(spec, rs, by_id(rs.size())) << summary(rs) << "\n";
    for (const Row& r : rs)
      if (r.state.state == State::failed) (*g_out) << "trial " << r.trial.id << " failed: " << r.state.reason << "\n";
    return kOk;
  }
  throw po::error("unknown command '" + cmd + "'");
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  g_out = &out;
  g_err = &err;
  const auto error = [&](const std::string& message) {
    out.flush();
    err << "saker: error: " << message << "\n";
    err.flush();
  };
  try {
    return dispatch(args);
  } catch (const Exit& e) {
    error(e.message);
    return e.code;
  } catch (const po::error& e) {
    error(std::string("saker-sweep: bad command line: ") + e.what() + "; run saker-sweep --help");
    return kUsage;
  } catch (const LoadError& e) {
    error(std::string("saker-sweep: ") + e.what());
    return kUnusable;
  } catch (const std::exception& e) {
    error(std::string("saker-sweep: ") + e.what());
    return kFailed;
  }
}

}  // namespace saker::sweep
