// saker-sweep's command line end to end, without Slurm (run_cli, the same front end the
// program calls): exit codes from saker(7), and messages that name the thing, the reason
// and the fix (issue 31). The trials are a shell "trainer": loss q/budget at step budget.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "ckpt_test_util.hpp"
#include "sweep/cli.hpp"

using namespace saker::sweep;
using saker::ckpt::testing::TempDir;
namespace fs = std::filesystem;

namespace {

struct Result {
  int rc;
  std::string out, err;
};

Result cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = run_cli(args, out, err);
  INFO(out.str() << err.str());
  return {rc, out.str(), err.str()};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// DIR/FILE: a sweep NAME over q in GRID; `first` runs before the trainer (e.g. a fault for
// q=1); it reports loss and eval_loss (and its metric: is `metric`).
std::string write_sweep(const TempDir& dir, const std::string& file, const std::string& name,
                        const std::string& first = "", const std::string& metric = "eval_loss",
                        const std::string& extra = "", const std::string& grid = "[1, 2]") {
  std::ofstream(dir / file) << "version: 1\nname: " << name << "\n" << extra
                            << "command:\n  - /bin/sh\n  - -c\n  - '" << first
                            << "mkdir -p {ckpt_dir} && awk -v q={q} -v b={budget} \"BEGIN {{ printf \\\"step=%d "
                               "loss=%.6f eval_loss=%.6f\\\\n\\\", b, q / b, 2 * q / b }}\" >> {metrics}'\n"
                               "space: {q: {grid: "
                            << grid << "}}\nmetric: {name: " << metric << "}\nbudget: {steps: 100}\n";
  return (dir / file).string();
}

std::string state_of(const fs::path& sweep_dir, int trial) {
  const std::string s = slurp(sweep_dir / "trials" / std::to_string(trial) / "state");
  const auto at = s.find("state=");
  return at == std::string::npos ? "pending" : s.substr(at + 6, s.find('\n', at) - at - 6);
}

}  // namespace

TEST_CASE("saker-sweep --help prints the usage and exits 0; no arguments is a usage error", "[sweep][cli]") {
  const Result help = cli({"--help"});
  CHECK(help.rc == 0);
  CHECK(help.out.find("saker-sweep run SWEEP") != std::string::npos);
  CHECK(cli({}).rc == 2);
}

TEST_CASE("unknown commands and options are named as such, with what was probably meant (exit 2)", "[sweep][cli]") {
  TempDir dir;
  const std::string q = write_sweep(dir, "q.yaml", "q");
  Result r = cli({"run", q, "--dryrun"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("unknown option --dryrun") != std::string::npos);
  CHECK(r.err.find("did you mean --dry-run?") != std::string::npos);
  CHECK(r.err.find("takes one argument") == std::string::npos);  // the file is not to blame
  CHECK(!fs::exists(dir / "q.sweep"));

  r = cli({"stauts", q});
  CHECK(r.rc == 2);
  CHECK(r.err.find("unknown command 'stauts'") != std::string::npos);
  CHECK(r.err.find("did you mean 'status'?") != std::string::npos);
  CHECK(cli({"stauts", "--help"}).rc == 2);  // --help does not hide an unknown command

  // An abbreviation is not guessed at: it is named, with the option it may stand for.
  r = cli({"report", q, "--met", "loss"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("unknown option --met (options are never abbreviated); did you mean --metric?") != std::string::npos);
  // A missing value, a missing sweep, two sweeps.
  r = cli({"report", q, "--svg"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("--svg needs a value") != std::string::npos);
  r = cli({"report", q, "--svg", "--metric", "loss"});  // not a plot named --metric
  CHECK(r.rc == 2);
  CHECK(r.err.find("--svg needs a value") != std::string::npos);
  r = cli({"status"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("no sweep given") != std::string::npos);
  CHECK(cli({"status", q, q}).rc == 2);
  // A subcommand's --help: its own usage, exit 0.
  r = cli({"best", "--help"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("saker-sweep best SWEEP [--command]") != std::string::npos);
  // A missing file, and a directory that is not a sweep's: 3 (an input that cannot be used).
  r = cli({"status", (dir / "nosuch.yaml").string()});
  CHECK(r.rc == 3);
  CHECK(r.err.find("no sweep file " + (dir / "nosuch.yaml").string() + ": it does not exist") != std::string::npos);
  fs::create_directories(dir / "empty");
  r = cli({"status", (dir / "empty").string()});
  CHECK(r.rc == 3);
  CHECK(r.err.find("not a sweep directory") != std::string::npos);
}

TEST_CASE("run --dry-run lists the trials it would run and writes nothing", "[sweep][cli]") {
  TempDir dir;
  const std::string q = write_sweep(dir, "q.yaml", "q");
  const Result r = cli({"run", q, "--dry-run"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("would run 2 of 2 trials") != std::string::npos);
  CHECK(r.out.find("--dry-run") == std::string::npos);
  CHECK(!fs::exists(dir / "q.sweep"));
}

TEST_CASE("two sweep files with the same name: never the same state, and the message is true", "[sweep][cli]") {
  TempDir dir;
  const std::string quick = write_sweep(dir, "quick.yaml", "quick");
  const std::string fixed = write_sweep(dir, "fixed.yaml", "quick", "", "eval_loss", "", "[1, 3]");
  REQUIRE(cli({"run", quick}).rc == 0);
  CHECK(state_of(dir / "quick.sweep", 0) == "completed");
  // The second file has its own state: none of quick.yaml's trials.
  Result r = cli({"status", fixed});
  CHECK(r.rc == 0);
  CHECK(r.out.find("completed") == std::string::npos);
  CHECK(r.out.find("2 trials: 2 pending") != std::string::npos);
  r = cli({"run", fixed});
  CHECK(r.rc == 0);
  CHECK(r.err.find("changed since") == std::string::npos);
  CHECK(state_of(dir / "fixed.quick.sweep", 1) == "completed");  // keyed by file and name
  CHECK(slurp(dir / "quick.sweep" / "trials" / "1" / "metrics") == "step=100 loss=0.020000 eval_loss=0.040000\n");

  // A file that really changed since it first ran: named, and what happened is true.
  write_sweep(dir, "quick.yaml", "quick", "", "eval_loss", "", "[1, 4]");
  r = cli({"run", quick});
  CHECK(r.rc == 4);
  CHECK(r.err.find("the sweep file " + quick + " changed since sweep quick first ran from it") != std::string::npos);
  CHECK(r.err.find("submitted") == std::string::npos);

  // Two files that name the same dir: the second is told whose state it is.
  const std::string a = write_sweep(dir, "a.yaml", "a", "", "eval_loss", "dir: shared\n");
  const std::string b = write_sweep(dir, "b.yaml", "b", "", "eval_loss", "dir: shared\n", "[5, 6]");
  REQUIRE(cli({"run", a}).rc == 0);
  r = cli({"status", b});
  CHECK(r.rc == 4);
  CHECK(r.err.find((dir / "shared").string() + " holds the state of sweep file " + a) != std::string::npos);
  CHECK(cli({"run", b}).rc == 4);

  // Two sweeps of one name with one checkpoints: never share lineages.
  const std::string c = write_sweep(dir, "c.yaml", "same", "", "eval_loss", "checkpoints: lineages\n");
  const std::string d = write_sweep(dir, "d.yaml", "same", "", "eval_loss", "checkpoints: lineages\n", "[7, 8]");
  REQUIRE(cli({"run", c}).rc == 0);
  r = cli({"run", d});
  CHECK(r.rc == 4);
  CHECK(r.err.find("the lineages in " + (dir / "lineages" / "same").string() + " are those of the sweep whose state is " +
                   (dir / "c.same.sweep").string()) != std::string::npos);
  CHECK(state_of(dir / "d.same.sweep", 0) == "pending");
  CHECK(cli({"run", c}).rc == 0);  // its own lineages: fine
}

TEST_CASE("a state directory of the old layout (NAME.sweep, whatever the file's name) still resumes", "[sweep][cli]") {
  TempDir dir;
  const std::string f = write_sweep(dir, "exp1.yaml", "lrsweep");
  // What saker-sweep wrote before state directories were keyed by file: DIR/sweep.yaml,
  // DIR/origin, no DIR/file; trial 0 completed.
  const fs::path old = dir / "lrsweep.sweep";
  fs::create_directories(old / "trials" / "0");
  fs::copy_file(f, old / "sweep.yaml");
  std::ofstream(old / "origin") << dir.path().string() << "\n";
  std::ofstream(old / "trials" / "0" / "state") << "state=completed\nrung=0\nruns=1\nresult.0=100 0.02\n";
  Result r = cli({"status", f});
  CHECK(r.rc == 0);
  CHECK(r.out.find("1 completed, 1 pending") != std::string::npos);
  r = cli({"run", f});
  CHECK(r.rc == 0);
  CHECK(r.out.find("running 1 of 2 trials") != std::string::npos);
  CHECK(state_of(old, 1) == "completed");
  CHECK(!fs::exists(dir / "exp1.lrsweep.sweep"));
  CHECK(slurp(old / "file") == f + "\n");  // now marked as this file's: it stays in use
  CHECK(cli({"status", f}).out.find("2 completed") != std::string::npos);
}

TEST_CASE("a metric that no trial reports fails the trial with the names it did report", "[sweep][cli]") {
  TempDir dir;
  const std::string f = write_sweep(dir, "typo.yaml", "typo", "", "eval_los");
  const Result r = cli({"run", f});
  CHECK(r.rc == 1);
  CHECK(r.out.find("reported eval_loss and loss, never eval_los") != std::string::npos);
  CHECK(r.out.find("metric: name:") != std::string::npos);
  // The other trial would fail the same way: it is not started.
  CHECK(state_of(dir / "typo.sweep", 1) == "pending");
  CHECK(r.err.find("sweep typo's metric eval_los is never reported by its program: trial 0 reported eval_loss, loss") !=
        std::string::npos);
  const Result s = cli({"status", f});
  CHECK(s.out.find("trial 0 failed: ") != std::string::npos);
  CHECK(s.out.find("reported eval_loss and loss") != std::string::npos);
}

TEST_CASE("report refuses a metric no trial reported, and titles only what it knows", "[sweep][cli]") {
  TempDir dir;
  const std::string f = write_sweep(dir, "r.yaml", "r");
  REQUIRE(cli({"run", f}).rc == 0);
  const fs::path svg = dir / "r.sweep" / "report.svg";
  Result r = cli({"report", f, "--metric", "nosuch"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("no trial of sweep r reported nosuch") != std::string::npos);
  CHECK(r.err.find("eval_loss, loss") != std::string::npos);
  CHECK(!fs::exists(svg));
  // The sweep's own metric: its goal. Another: the goal given, or none.
  CHECK(cli({"report", f}).rc == 0);
  CHECK(slurp(svg).find("eval_loss against step (lower is better)") != std::string::npos);
  CHECK(cli({"report", f, "--metric", "loss"}).rc == 0);
  CHECK(slurp(svg).find("is better") == std::string::npos);
  CHECK(cli({"report", f, "--metric", "loss", "--goal", "maximize"}).rc == 0);
  CHECK(slurp(svg).find("loss against step (higher is better)") != std::string::npos);
  r = cli({"report", f, "--goal", "maximize"});  // the file says eval_loss is minimized
  CHECK(r.rc == 2);
  CHECK(r.err.find("minimize") != std::string::npos);
  CHECK(cli({"report", f, "--metric", "loss", "--goal", "up"}).rc == 2);
}

TEST_CASE("best is read-only: it prints the same reproduce command every time and writes nothing", "[sweep][cli]") {
  TempDir dir;
  const std::string f = write_sweep(dir, "b.yaml", "b");
  REQUIRE(cli({"run", f}).rc == 0);
  const Result one = cli({"best", f}), two = cli({"best", f});
  CHECK(one.rc == 0);
  CHECK(one.out == two.out);
  CHECK(one.out.find("best trial 0 of 2") != std::string::npos);
  CHECK(!fs::exists(dir / "b.sweep" / "reproduce"));
  const Result cmd = cli({"best", f, "--command"});
  CHECK(cmd.rc == 0);
  // The command makes its fresh lineage itself.
  CHECK(cmd.out.find("mkdir -p " + (dir / "b.sweep" / "reproduce" / "trial-0.1" / "ckpt").string() + " && ") !=
        std::string::npos);
  CHECK(!fs::exists(dir / "b.sweep" / "reproduce"));
}

TEST_CASE("a local run that is interrupted says so, in its output and in the trial's state", "[sweep][cli]") {
  TempDir dir;
  // SIGINT to saker-sweep while trial 0 (q=1) runs; its command dies of it.
  const std::string f = write_sweep(dir, "i.yaml", "i", "if [ {q} = 1 ]; then kill -INT $PPID; exit 130; fi; ");
  Result r = cli({"run", f});
  CHECK(r.rc == 75);
  CHECK(r.out.find("trial 0 interrupted") != std::string::npos);
  CHECK(r.out.find("saker-sweep run " + f + " resumes it") != std::string::npos);
  CHECK(r.out.find("job runs again") == std::string::npos);
  CHECK(state_of(dir / "i.sweep", 0) == "interrupted");
  CHECK(state_of(dir / "i.sweep", 1) == "pending");  // no more work after the signal
  r = cli({"status", f});
  CHECK(r.out.find("interrupted") != std::string::npos);
  CHECK(r.out.find("running") == std::string::npos);

  // A run killed outright (SIGKILL, a closed terminal) leaves its trial "running": status
  // shows it interrupted once that process is gone, and the next run resumes it.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  fs::create_directories(dir / "i.sweep" / "trials" / "1");
  std::ofstream(dir / "i.sweep" / "trials" / "1" / "state")
      << "state=running\nrung=0\nruns=1\nowner=local" << gone << "." << host << "_1\n";
  r = cli({"status", f});
  CHECK(r.out.find("2 trials: 2 interrupted") != std::string::npos);
  CHECK(r.out.find("trial 1 interrupted: the saker-sweep run that ran it (process " + std::to_string(gone) + " on " +
                   host + ") is gone at rung 0; saker-sweep run " + f + " resumes it") != std::string::npos);

  // A command that stops after an emergency checkpoint (exit 75) with no job to requeue.
  TempDir other;
  const std::string g = write_sweep(other, "p.yaml", "p", "if [ {q} = 1 ] && [ ! -e {ckpt_dir}/once ]; then "
                                                      "mkdir -p {ckpt_dir}; touch {ckpt_dir}/once; exit 75; fi; ");
  r = cli({"run", g});
  CHECK(r.rc == 75);
  CHECK(r.out.find("job runs again") == std::string::npos);
  CHECK(state_of(other / "p.sweep", 0) == "interrupted");
  // Running again resumes it.
  r = cli({"run", g});
  CHECK(r.rc == 0);
  CHECK(r.out.find("trial 0 (q=1) resumes at rung 0") != std::string::npos);
  CHECK(state_of(other / "p.sweep", 0) == "completed");
}

TEST_CASE("every subcommand: its --help, an unknown option, no sweep, a file that is no sweep file", "[sweep][cli]") {
  TempDir dir;
  std::ofstream(dir / "notes.txt") << "just: [some, notes\n";
  for (const std::string c : {"submit", "run", "status", "best", "report", "trial"}) {
    INFO(c);
    const Result help = cli({c, "--help"});
    CHECK(help.rc == 0);
    CHECK(help.out.rfind("Usage: saker-sweep " + c + " ", 0) == 0);
    const Result unknown = cli({c, (dir / "q.yaml").string(), "--bogus"});
    CHECK(unknown.rc == 2);
    CHECK(unknown.err.find("saker-sweep " + c + ": unknown option --bogus") != std::string::npos);
    CHECK(unknown.err.find("(fix: saker-sweep " + c + " takes") != std::string::npos);
    const Result none = cli({c});
    CHECK(none.rc == 2);
    CHECK(none.err.find("saker-sweep " + c + ": no ") != std::string::npos);
    if (c == "trial") continue;  // outside a job array task: 3 before the file is read
    const Result bad = cli({c, (dir / "notes.txt").string()});
    CHECK(bad.rc == 3);
    CHECK(bad.err.find((dir / "notes.txt").string() + ":") != std::string::npos);  // FILE:LINE:COLUMN
  }
}
