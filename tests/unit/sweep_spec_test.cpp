// The sweep file loader: a good file, and bad files by class -- every field of the wrong
// kind, missing or out of range, duplicate and unknown keys, an empty space, budget 0 --
// each refused with FILE:LINE:COLUMN and what was expected.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "sweep/spec.hpp"

using namespace saker::sweep;

namespace {

const std::string kGood = R"(version: 1
name: lr-width
command: saker-run --ckpt-dir {ckpt_dir} -- saker-train --lr {lr} --layers {width},{width} --steps {budget} --opt {opt}
space:
  lr: {log_uniform: [1e-4, 1e-1]}
  width: {choice: [16, 32, 64]}
  opt: {grid: [adam, sgd]}
search:
  seed: 42
  samples: 6
metric:
  name: eval_loss
  goal: minimize
budget:
  steps: 200
early_stopping:
  rule: asha
  min_steps: 25
  reduction: 2
slurm:
  concurrency: 4
  options: [-p, all, --time=10:00]
  datasets: [imagenet@2012, telemetry]
)";

Spec load(const std::string& text) { return load_string(text, "s.yaml", "/base"); }

// Replaces the first occurrence of `from` in the good file by `to`.
std::string with(const std::string& from, const std::string& to) {
  std::string s = kGood;
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

void expect_error(const std::string& text, int line, int column, const std::string& needle) {
  INFO(text);
  try {
    load(text);
    FAIL("no error for: " << needle);
  } catch (const LoadError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK(e.line() == line);
    CHECK(e.column() == column);
    CHECK(std::string(e.what()).rfind("s.yaml:" + std::to_string(line) + ":" + std::to_string(column) + ": ", 0) == 0);
  }
}

}  // namespace

TEST_CASE("a full sweep file loads", "[sweep][spec]") {
  const Spec s = load(kGood);
  CHECK(s.name == "lr-width");
  CHECK(s.dir == "/base/s.lr-width.sweep");  // keyed by the file and the name
  CHECK(s.checkpoints == "/base/s.lr-width.sweep/ckpt");
  CHECK(s.lineage(7) == "/base/s.lr-width.sweep/ckpt/lr-width/trial-7");
  CHECK(load_string(kGood, "/x/lr-width.yaml", "/base").dir == "/base/lr-width.sweep");
  CHECK(default_dir("/b", "/b/lr-width.yml", "lr-width") == "/b/lr-width.sweep");
  CHECK(default_dir("/b", "lr-width", "lr-width") == "/b/lr-width.sweep");
  CHECK(default_dir("/b", "fixed.yaml", "quick") == "/b/fixed.quick.sweep");
  CHECK(load_string(kGood, "s.yaml", "/base", {}, "/sub/../state").dir == "/state");
  REQUIRE(s.space.size() == 3);
  CHECK(s.space[0].kind == Param::Kind::log_uniform);
  CHECK(s.space[1].values == std::vector<std::string>{"16", "32", "64"});
  CHECK(s.grid_size() == 2);
  CHECK(s.trial_count() == 12);
  CHECK(s.seed == 42);
  CHECK(s.metric == "eval_loss");
  CHECK_FALSE(s.maximize);
  CHECK(s.budget == 200);
  CHECK(s.stopping.rule == Rule::asha);
  CHECK(s.rungs() == std::vector<std::uint64_t>{25, 50, 100, 200});
  CHECK(s.slurm.concurrency == 4);
  CHECK(s.slurm.options == std::vector<std::string>{"-p", "all", "--time=10:00"});
  CHECK(s.slurm.datasets == "imagenet@2012,telemetry");
}

TEST_CASE("optional parts have defaults; dir and checkpoints resolve from the file's folder", "[sweep][spec]") {
  const Spec s = load(R"(version: 1
name: s
dir: runs/s
checkpoints: /lustre/ae/ckpt
command: [train, "--lr={lr}", "--steps {budget}"]
space: {lr: {uniform: [0.1, 0.2]}}
metric: {name: acc, goal: maximize}
budget: {steps: 10}
)");
  CHECK(s.dir == "/base/runs/s");
  CHECK(s.lineage(0) == "/lustre/ae/ckpt/s/trial-0");
  CHECK(s.maximize);
  CHECK(s.samples == 1);
  CHECK(s.stopping.rule == Rule::none);
  CHECK(s.rungs() == std::vector<std::uint64_t>{10});
  CHECK(s.command.words().size() == 3);
  CHECK(s.command.render({{"lr", "0.15"}, {"budget", "10"}}) ==
        std::vector<std::string>{"train", "--lr=0.15", "--steps 10"});
  CHECK(s.slurm.concurrency == 0);
}

TEST_CASE("bad sweep files: structure, YAML and keys", "[sweep][spec]") {
  expect_error("", 1, 1, "the file is empty");
  expect_error("[1, 2]\n", 1, 1, "the sweep is a list");
  expect_error(kGood + "colour: red\n", 24, 1, "unknown key 'colour' in the sweep");
  expect_error(kGood + "name: again\n", 24, 1, "duplicate key 'name' (first at line 2)");
  expect_error(with("  seed: 42", "  seed: 42\n  seed: 43"), 10, 3, "duplicate key 'seed'");
  expect_error(with("  width:", "  lr:"), 6, 3, "duplicate key 'lr'");
  expect_error(with("version: 1\n", "version: 1\nx: &a 1\n"), 2, 4, "anchor");
  expect_error(with("name: lr-width\n", ""), 1, 1, "the sweep has no 'name'");
  expect_error(with("metric:\n  name: eval_loss\n  goal: minimize\n", ""), 1, 1, "no 'metric'");
  expect_error(with("budget:\n  steps: 200\n", ""), 1, 1, "no 'budget'");
  expect_error(with("version: 1", "version: 2"), 1, 10, "unsupported sweep file version 2");
  expect_error(with("version: 1", "version: one"), 1, 10, "bad version 'one'");
  expect_error(with("search:\n  seed: 42", "search:\n  sed: 42"), 9, 3, "unknown key 'sed' in search");
  expect_error(with("  goal: minimize", "  goal: minimize\n  unit: s"), 14, 3, "unknown key 'unit' in metric");
  expect_error(with("  concurrency: 4", "  concurency: 4"), 21, 3, "unknown key 'concurency' in slurm");
  expect_error(with("  steps: 200", "  step: 200"), 15, 3, "unknown key 'step' in budget");
  expect_error(with("  reduction: 2", "  eta: 2"), 19, 3, "unknown key 'eta' in early_stopping");
}

TEST_CASE("bad sweep files: names and the command", "[sweep][spec]") {
  expect_error(with("name: lr-width", "name: \"lr width\""), 2, 7, "bad sweep name 'lr width'");
  expect_error(with("name: lr-width", "name: ../up"), 2, 7, "bad sweep name '../up'");
  expect_error(with("name: lr-width", "name: [a]"), 2, 7, "sweep name is a list");
  expect_error(with("command: saker-run --ckpt-dir {ckpt_dir} -- saker-train --lr {lr} --layers {width},{width} --steps {budget} --opt {opt}", "command: {a: 1}"), 3, 10, "command is a mapping");
  expect_error(with("--opt {opt}", "--opt {opt} --seed {seed}"), 3, 10, "uses {seed}, which is not a parameter");
  expect_error(with(" --steps {budget}", ""), 3, 10, "the command has no {budget}");
  expect_error(with(" --opt {opt}", ""), 3, 10, "does not use parameter opt");
  expect_error(with("--opt {opt}", "--opt {opt"), 3, 10, "'{' without a placeholder name");
  expect_error(with("--opt {opt}", "--opt {opt}}"), 3, 10, "'}' without '{'");
  expect_error(with("--opt {opt}", "--opt {opt} {}"), 3, 10, "'{' without a placeholder name");
  expect_error(with("command: saker-run --ckpt-dir {ckpt_dir} -- saker-train --lr {lr} --layers {width},{width} --steps {budget} --opt {opt}", "command: []"), 3, 10, "command is an empty list");
}

TEST_CASE("bad sweep files: the space", "[sweep][spec]") {
  const std::string space = "  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: [16, 32, 64]}\n  opt: {grid: [adam, sgd]}\n";
  const auto with_space = [&](const std::string& s) { return with(space, s); };
  expect_error(with("space:\n" + space, "space: {}\n"), 4, 8, "the space has no parameters");
  expect_error(with("space:\n" + space, "space: [lr]\n"), 4, 8, "space is a list");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: [16, 32, 64]}\n  opt: 3\n"), 7, 8,
               "parameter opt is a scalar");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1], uniform: [1, 2]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 7, "needs exactly one distribution");
  expect_error(with_space("  lr: {}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 7, "needs exactly one distribution");
  expect_error(with_space("  lr: {normal: [0, 1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 8,
               "unknown key 'normal' in parameter lr");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: []}\n  opt: {grid: [a]}\n"), 6, 19,
               "parameter width choice is an empty list");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: 16}\n  opt: {grid: [a]}\n"), 6, 19,
               "parameter width choice is a scalar");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: [16, 16]}\n  opt: {grid: [a]}\n"), 6, 24,
               "duplicate value '16' for parameter width");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: [[16]]}\n  opt: {grid: [a]}\n"), 6, 20,
               "parameter width value is a list");
  expect_error(with_space("  lr: {log_uniform: [1e-4, 1e-1]}\n  width: {choice: [\"a b\"]}\n  opt: {grid: [a]}\n"), 6, 20,
               "bad value 'a b' for parameter width");
  expect_error(with_space("  lr: {log_uniform: [1e-4]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 21,
               "has 1 entries");
  expect_error(with_space("  lr: {log_uniform: [1e-1, 1e-4]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 21,
               "low 1e-1 is not below high 1e-4");
  expect_error(with_space("  lr: {log_uniform: [0, 1e-1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 22,
               "log_uniform needs a positive low");
  expect_error(with_space("  lr: {uniform: [a, 1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 18,
               "bad parameter lr low 'a'");
  expect_error(with_space("  lr: {uniform: [nan, 1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 18,
               "a finite number");
  expect_error(with_space("  lr: {uniform: [0, inf]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 21,
               "a finite number");
  expect_error(with_space("  lr: {int_uniform: [1, 2.5]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 21,
               "int_uniform needs whole numbers");
  expect_error(with_space("  budget: {grid: [1]}\n  lr: {uniform: [0, 1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 3, "parameter name 'budget' cannot be a {placeholder}");
  expect_error(with_space("  l-r: {grid: [1]}\n  width: {choice: [16]}\n  opt: {grid: [a]}\n"), 5, 3,
               "cannot be a {placeholder}");
  expect_error(with("  samples: 6", "  samples: 0"), 10, 12, "bad samples '0'");
  expect_error(with("  samples: 6", "  samples: 1001"), 10, 12, "bad samples '1001'");
  expect_error(with("  samples: 6", "  samples: -3"), 10, 12, "bad samples '-3'");
  expect_error(with("  seed: 42", "  seed: 4.2"), 9, 9, "bad search seed '4.2'");
  expect_error(with("  seed: 42", "  seed: [42]"), 9, 9, "search seed is a list");
  // A grid with more samples would run every point several times.
  expect_error(with_space("  lr: {grid: [1, 2]}\n  width: {grid: [16]}\n  opt: {grid: [a]}\n"), 10, 12,
               "repeats every grid point");
  // Over the array limit: 2 x 3 x 200 samples.
  expect_error(with("  samples: 6", "  samples: 600"), 5, 3, "the sweep has 1200 trials");
}

TEST_CASE("bad sweep files: metric, budget, early stopping and slurm", "[sweep][spec]") {
  expect_error(with("  goal: minimize", "  goal: lower"), 13, 9, "bad goal 'lower'");
  expect_error(with("  name: eval_loss", "  name: step"), 12, 9, "'step' is the step counter");
  expect_error(with("  name: eval_loss", "  name: eval loss"), 12, 9, "bad metric name 'eval loss'");
  expect_error(with("metric:\n  name: eval_loss\n  goal: minimize", "metric: eval_loss"), 11, 9, "metric is a scalar");
  expect_error(with("metric:\n  name: eval_loss", "metric:\n  nam: eval_loss"), 12, 3,
               "unknown key 'nam' in metric");
  expect_error(with("  steps: 200", "  steps: 0"), 15, 10, "bad budget steps '0'");
  expect_error(with("  steps: 200", "  steps: -5"), 15, 10, "bad budget steps '-5'");
  expect_error(with("  steps: 200", "  steps: lots"), 15, 10, "bad budget steps 'lots'");
  expect_error(with("  steps: 200", "  steps: 99999999999999"), 15, 10, "a whole number from 1 to");
  expect_error(with("  steps: 200", "  steps: {n: 2}"), 15, 10, "budget steps is a mapping");
  expect_error(with("  rule: asha", "  rule: hyperband"), 17, 9, "bad rule 'hyperband'");
  expect_error(with("  min_steps: 25", "  min_steps: 0"), 18, 14, "bad min_steps '0'");
  expect_error(with("  min_steps: 25", "  min_steps: 200"), 18, 14, "min_steps 200 is not below the budget");
  expect_error(with("  reduction: 2", "  reduction: 1"), 19, 14, "bad reduction '1'");
  expect_error(with("  reduction: 2", "  reduction: 2\n  min_trials: 0"), 20, 15, "bad min_trials '0'");
  expect_error(with("  rule: asha\n  min_steps: 25\n", "  rule: asha\n"), 17, 3, "early_stopping has no 'min_steps'");
  expect_error(with("  concurrency: 4", "  concurrency: 0"), 21, 16, "bad concurrency '0'");
  expect_error(with("  concurrency: 4", "  concurrency: four"), 21, 16, "bad concurrency 'four'");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: -p all"), 22, 12, "slurm options is a scalar");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: [--array=1-3]"), 22, 13,
               "sbatch option --array=1-3 is saker-sweep's to set");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: [-o, x.out]"), 22, 13, "is saker-sweep's to set");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: [--wrap, x]"), 22, 13, "is saker-sweep's to set");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: [--dataset=x]"), 22, 13,
               "the datasets go under slurm: datasets:");
  expect_error(with("  datasets: [imagenet@2012, telemetry]", "  datasets: [imagenet, imagenet]"), 23, 13,
               "bad datasets");
  expect_error(with("  datasets: [imagenet@2012, telemetry]", "  datasets: [\"bad name\"]"), 23, 13, "bad datasets");
  expect_error(with("  datasets: [imagenet@2012, telemetry]", "  datasets: []"), 23, 13, "datasets is an empty list");
}

TEST_CASE("bad sweep files: every required key missing, every section of the wrong kind", "[sweep][spec]") {
  // Drop one required top-level key (and its block) at a time.
  for (const char* key : {"version", "name", "command", "space", "metric", "budget"}) {
    std::string text, line;
    std::istringstream in(kGood);
    bool dropping = false;
    while (std::getline(in, line)) {
      if (line.rfind(std::string(key) + ":", 0) == 0) dropping = true;
      else if (!line.empty() && line[0] != ' ') dropping = false;
      if (!dropping) text += line + "\n";
    }
    expect_error(text, 1, 1, std::string("the sweep has no '") + key + "'");
  }
  expect_error(with("budget:\n  steps: 200", "budget: {}"), 14, 9, "budget has no 'steps'");
  expect_error(with("metric:\n  name: eval_loss\n  goal: minimize", "metric: {goal: minimize}"), 11, 9,
               "metric has no 'name'");
  expect_error(with("name: lr-width\n", "name: lr-width\ndir: [a]\n"), 3, 6, "dir is a list");
  expect_error(with("name: lr-width\n", "name: lr-width\ncheckpoints: {a: 1}\n"), 3, 14, "checkpoints is a mapping");
  expect_error(with("search:\n  seed: 42\n  samples: 6", "search: random"), 8, 9, "search is a scalar");
  expect_error(with("early_stopping:\n  rule: asha\n  min_steps: 25\n  reduction: 2", "early_stopping: [asha]"), 16, 17, "early_stopping is a list");
  expect_error(with("slurm:\n  concurrency: 4\n  options: [-p, all, --time=10:00]\n  datasets: [imagenet@2012, telemetry]",
                    "slurm: 4"), 20, 8, "slurm is a scalar");
  expect_error(with("  goal: minimize", "  goal: [minimize]"), 13, 9, "metric goal is a list");
  expect_error(with("  rule: asha", "  rule: {asha: 1}"), 17, 9, "early_stopping rule is a mapping");
  expect_error(with("  options: [-p, all, --time=10:00]", "  options: [[-p]]"), 22, 13, "sbatch option is a list");
  expect_error(with("  datasets: [imagenet@2012, telemetry]", "  datasets: [{a: 1}]"), 23, 14, "dataset is a mapping");
  expect_error(with("command: saker-run --ckpt-dir {ckpt_dir} -- saker-train --lr {lr} --layers {width},{width} --steps {budget} --opt {opt}", "command:\n  - [saker-run]"), 4, 5, "command word is a list");
}

TEST_CASE("limits come from the policy loader's LoadLimits", "[sweep][spec]") {
  saker::policy::LoadLimits tiny;
  tiny.max_bytes = 64;
  CHECK_THROWS_AS(load_string(kGood, "s.yaml", "/base", tiny), LoadError);
  CHECK_THROWS_WITH(load_file("/nonexistent/sweep.yaml"), Catch::Contains("cannot open the sweep file"));
}
