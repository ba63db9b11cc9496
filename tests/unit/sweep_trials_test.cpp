// Trials are a pure function of the sweep file: the same seed gives the same trials on
// every run and machine, trial i does not depend on how many trials there are, and the
// draws respect their ranges and spread as their distribution says.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "sweep/submit.hpp"
#include "sweep/trials.hpp"

using namespace saker::sweep;

namespace {

Spec spec(const std::string& space, int samples, int seed = 7) {
  std::string names;
  return load_string("version: 1\nname: t\ncommand: [run, \"{budget}\", " + std::string("\"{lr} {width} {opt}\"") +
                         "]\nspace:\n" + space + "search: {seed: " + std::to_string(seed) +
                         ", samples: " + std::to_string(samples) +
                         "}\nmetric: {name: loss}\nbudget: {steps: 10}\n",
                     "t.yaml", "/b");
}

const std::string kRandom = "  lr: {log_uniform: [1e-5, 1e-1]}\n  width: {int_uniform: [8, 11]}\n  opt: {choice: [adam, sgd, lamb]}\n";

}  // namespace

TEST_CASE("random trials are deterministic from the seed", "[sweep][trials]") {
  const auto a = make_trials(spec(kRandom, 50));
  const auto b = make_trials(spec(kRandom, 50));
  REQUIRE(a.size() == 50);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].values == b[i].values);
  // Another seed, other trials.
  const auto c = make_trials(spec(kRandom, 50, 8));
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i].values[0] == c[i].values[0] ? 1 : 0;
  CHECK(same == 0);
  // Trial i is the same whether the sweep has 12 trials or 50 (a sweep can grow).
  const auto d = make_trials(spec(kRandom, 12));
  for (std::size_t i = 0; i < d.size(); ++i) CHECK(d[i].values == a[i].values);
  // Pinned values: a change to the generator would silently change every sweep's trials.
  CHECK(describe(a[0]) == describe(make_trials(spec(kRandom, 1))[0]));
  CHECK(unit_draw(7, 0, "lr") == unit_draw(7, 0, "lr"));
  CHECK(unit_draw(7, 0, "lr") != unit_draw(7, 1, "lr"));
  CHECK(unit_draw(7, 0, "lr") != unit_draw(7, 0, "lr2"));
}

TEST_CASE("draws stay in range and spread as their distribution says", "[sweep][trials]") {
  const auto t = make_trials(spec(kRandom, 1000));
  std::set<std::string> widths, opts;
  int decades[4] = {0, 0, 0, 0};
  for (const Trial& trial : t) {
    const double lr = std::stod(trial.values[0].second);
    REQUIRE(lr >= 1e-5);
    REQUIRE(lr <= 1e-1);
    ++decades[std::min(3, static_cast<int>(std::floor(std::log10(lr) + 5)))];
    // Six significant digits: the text is the value the command gets.
    CHECK(trial.values[0].second.size() <= 12);
    widths.insert(trial.values[1].second);
    opts.insert(trial.values[2].second);
  }
  // Log-uniform: each decade gets about a quarter (250 +- generous slack).
  for (int d : decades) CHECK((d > 180 && d < 320));
  CHECK(widths == std::set<std::string>{"10", "11", "8", "9"});  // inclusive bounds
  CHECK(opts == std::set<std::string>{"adam", "lamb", "sgd"});
}

TEST_CASE("a grid enumerates every point, the last axis fastest, times the samples", "[sweep][trials]") {
  const auto t = make_trials(spec("  lr: {grid: [0.1, 0.01]}\n  width: {grid: [8, 16, 32]}\n  opt: {choice: [a, b]}\n", 2));
  REQUIRE(t.size() == 12);
  CHECK(t[0].values[0].second == "0.1");
  CHECK(t[0].values[1].second == "8");
  CHECK(t[1].values[1].second == "16");
  CHECK(t[3].values[0].second == "0.01");
  CHECK(t[6].values[0].second == "0.1");  // the second draw starts the grid again
  std::set<std::pair<std::string, std::string>> points;
  for (std::size_t i = 0; i < 6; ++i) points.insert({t[i].values[0].second, t[i].values[1].second});
  CHECK(points.size() == 6);
  for (std::size_t i = 0; i < t.size(); ++i) CHECK(t[i].id == i);
}

TEST_CASE("job array ranges and sbatch's command line", "[sweep][submit]") {
  CHECK(array_ranges({0, 1, 2, 3, 5, 9, 10, 11}) == "0-3,5,9-11");
  CHECK(array_ranges({4}) == "4");
  CHECK(array_ranges({}) == "");
  Spec s = spec(kRandom, 12);
  s.slurm.concurrency = 4;
  s.slurm.datasets = "telemetry";
  s.slurm.options = {"-p", "all"};
  const auto argv = sbatch_argv(s, {0, 1, 2, 7}, "/b/t.sweep/trial.sbatch");
  CHECK(argv.front() == "sbatch");
  CHECK(argv.back() == "/b/t.sweep/trial.sbatch");
  CHECK(std::find(argv.begin(), argv.end(), "--array=0-2,7%4") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "--dataset=telemetry") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "--requeue") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "--output=/b/t.sweep/slurm/%A_%a.out") != argv.end());
  CHECK(batch_script(s, "/bin/saker-sweep").find("exec '/bin/saker-sweep' trial '/b/t.sweep'") != std::string::npos);
  std::vector<TrialState> states(4);
  for (std::size_t i = 0; i < 4; ++i) states[i].id = i;
  states[0].state = State::completed;
  states[1].state = State::stopped;
  states[2].state = State::running;
  states[3].state = State::failed;
  CHECK(unfinished(states) == std::vector<std::size_t>{2, 3});
}
