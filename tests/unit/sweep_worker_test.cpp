// A worker end to end without Slurm: a 4-trial ASHA sweep of a shell command, run by
// four workers one after another; preemption (exit 75) keeps the trial for the same
// worker; failures are recorded and retried; a stale owner's trial is taken over.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "ckpt_test_util.hpp"
#include "sweep/worker.hpp"

using namespace saker::sweep;
using saker::ckpt::testing::TempDir;

namespace {

// The "trainer": loss q/budget at step budget; {ckpt_dir}/last remembers the step it
// reached, so a rerun says where it resumed from.
Spec fake(const TempDir& dir, const std::string& stopping, const std::string& extra = "") {
  const std::string text =
      "version: 1\nname: w\ndir: state\n"
      "command:\n  - /bin/sh\n  - -c\n"
      "  - 'mkdir -p {ckpt_dir} && echo resumed from $(cat {ckpt_dir}/last 2>/dev/null || echo 0) && " + extra +
      "awk -v q={q} -v b={budget} \"BEGIN {{ printf \\\"step=%d loss=%.6f\\\\n\\\", b, q / b }}\" >> {metrics} && "
      "echo {budget} > {ckpt_dir}/last && test \"$SAKER_METRICS_FILE\" = {metrics}'\n"
      "space: {q: {grid: [4, 1, 3, 2]}}\nmetric: {name: loss}\nbudget: {steps: 100}\n" + stopping;
  return load_string(text, "w.yaml", dir.path());
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("ASHA over four workers: three stop at their rung, the best resumes from its checkpoint", "[sweep][worker]") {
  TempDir dir;
  const Spec s = fake(dir, "early_stopping: {rule: asha, min_steps: 25, reduction: 4}\n");
  const Store store(s.dir);
  std::ostringstream out;
  for (std::size_t t = 0; t < 4; ++t) CHECK(run_worker(s, store, {"7_" + std::to_string(t), t, run_logged}, out) == 0);
  INFO(out.str());
  const auto all = store.load_all(4);
  for (std::size_t t : {0, 2, 3}) {
    CHECK(all[t].state == State::stopped);
    CHECK(all[t].results.size() == 1);
    CHECK(slurp(s.lineage(t) / "last") == "25\n");
  }
  CHECK(all[1].state == State::completed);
  CHECK(all[1].results.at(0).first == 25);
  CHECK(all[1].results.at(1) == std::make_pair(std::uint64_t{100}, 0.01));
  CHECK(all[1].runs == 2);
  // The promoted trial resumed from its own lineage, at the step its first rung reached.
  CHECK(slurp(store.log_path(1)) == "resumed from 0\nresumed from 25\n");
  CHECK(out.str().find("trial 1 (q=1) promoted at rung 1") != std::string::npos);
  // What the log says of a rung's end is what happened: trial 1, the best so far, was not
  // stopped but waits for promotion; trial 2 cannot make the top 1 of 4 any more.
  const auto line = [&](const std::string& start) {
    const std::string text = out.str();
    const std::size_t at = text.find(start);
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  CHECK(line("saker-sweep: trial 1: ").find("stopped") == std::string::npos);
  CHECK(line("saker-sweep: trial 1: ").find("waits at rung 0") != std::string::npos);
  CHECK(line("saker-sweep: trial 2: ").find(": stopped: ") != std::string::npos);
  // A second pass finds nothing to do: finished trials never rerun.
  CHECK(run_worker(s, store, {"8_1", 1, run_logged}, out) == 0);
  CHECK(store.load(1).runs == 2);
}

TEST_CASE("a preempted segment stays with its worker and resumes; failures are recorded", "[sweep][worker]") {
  TempDir dir;
  const Spec s = fake(dir, "");
  const Store store(s.dir);
  std::ostringstream out;
  int calls = 0;
  WorkerOptions o{"9_2", 2, [&](const Command& c, const std::filesystem::path& log) {
                    return ++calls == 1 ? 75 : run_logged(c, log);
                  }};
  CHECK(run_worker(s, store, o, out) == kWorkerPreempted);
  CHECK(store.load(2).state == State::running);
  CHECK(store.load(2).owner == "9_2");
  // Another array's worker for trial 0 leaves it alone (a live worker holds it) ...
  CHECK(run_worker(s, store, {"9_0", 0, run_logged}, out) == 0);
  CHECK(store.load(2).state == State::running);
  // ... and the requeued worker resumes it.
  CHECK(run_worker(s, store, o, out) == 0);
  CHECK(store.load(2).state == State::completed);
  CHECK(store.load(2).runs == 2);

  // A failing command: recorded with its exit status, run again by the next worker.
  TempDir other;
  const Spec bad = fake(other, "", "test {q} != 3 && ");
  const Store bad_store(bad.dir);
  CHECK(run_worker(bad, bad_store, {"10_2", 2, run_logged}, out) == kWorkerFailed);
  CHECK(bad_store.load(2).state == State::failed);
  CHECK(bad_store.load(2).reason.find("exit 1 at rung 0") != std::string::npos);
  CHECK(run_worker(bad, bad_store, {"11_2", 2, run_logged}, out) == kWorkerFailed);
  CHECK(bad_store.load(2).runs == 2);
}

TEST_CASE("a command that reports no metric fails with what it should write", "[sweep][worker]") {
  TempDir dir;
  const Spec s = load_string("version: 1\nname: m\ncommand: /bin/true {q} {budget}\nspace: {q: {grid: [1]}}\n"
                             "metric: {name: loss}\nbudget: {steps: 10}\n", "m.yaml", dir.path());
  const Store store(s.dir);
  std::ostringstream out;
  CHECK(run_worker(s, store, {"1_0", 0, run_logged}, out) == kWorkerFailed);
  CHECK(store.load(0).reason.find("has no loss after step 0 and at or before step 10") != std::string::npos);
  // A promoted segment that reports nothing new: the previous rung's report does not count.
  const Spec stale = load_string("version: 1\nname: s\ncommand: [/bin/sh, -c, 'test {budget} = 100 || echo step=25 loss={q} >> {metrics}']\n"
                                 "space: {q: {grid: [1, 2, 3, 4]}}\nmetric: {name: loss}\nbudget: {steps: 100}\n"
                                 "early_stopping: {rule: asha, min_steps: 25, reduction: 4}\n", "s.yaml", dir.path());
  for (std::size_t t = 0; t < 3; ++t) CHECK(run_worker(stale, Store(stale.dir), {"2_" + std::to_string(t), t, run_logged}, out) == 0);
  CHECK(run_worker(stale, Store(stale.dir), {"2_3", 3, run_logged}, out) == kWorkerFailed);
  CHECK(Store(stale.dir).load(0).state == State::failed);  // trial 0 (loss 1) was promoted
  CHECK(Store(stale.dir).load(0).reason.find("has no loss after step 25 and at or before step 100") != std::string::npos);
  // A program that cannot start: 127, recorded.
  const Spec missing = load_string("version: 1\nname: x\ncommand: /nonexistent/prog {q} {budget}\nspace: {q: {grid: [1]}}\n"
                                   "metric: {name: loss}\nbudget: {steps: 10}\n", "x.yaml", dir.path());
  CHECK(run_worker(missing, Store(missing.dir), {"1_0", 0, run_logged}, out) == kWorkerFailed);
  CHECK(Store(missing.dir).load(0).reason.find("exit 127") != std::string::npos);
}

TEST_CASE("trial state files round-trip and damaged ones are named", "[sweep][state]") {
  TempDir dir;
  const Store store(dir.path());
  TrialState t;
  t.id = 3;
  t.state = State::stopped;
  t.rung = 1;
  t.runs = 2;
  t.results[0] = {25, 0.1234567890123};
  t.results[1] = {50, 1e-9};
  t.reason = "line one\nline two";
  store.save(t);
  const TrialState u = store.load(3);
  CHECK(u.state == State::stopped);
  CHECK(u.results == t.results);
  CHECK(u.reason == "line one line two");
  CHECK(store.load(4).state == State::pending);
  store.write_file("trials/5/state", "state=sleeping\n");
  CHECK_THROWS_WITH(store.load(5), Catch::Contains("damaged trial state") && Catch::Contains("unknown state 'sleeping'"));
  store.write_file("trials/6/state", "rung=x\n");
  CHECK_THROWS_WITH(store.load(6), Catch::Contains("bad value in line 'rung=x'"));
  CHECK(owner_job("12_3") == "12");
}
