// A sweep file (saker-sweep.yaml(5)) as a checked, immutable description: the search
// space, the command template, the metric and its goal, the step budget, the early
// stopping rule and the Slurm side (sbatch options, %N concurrency, datasets).
// The loader reuses the policy loader's YAML document (policies/yaml_doc.hpp): the same
// byte and nesting limits, no anchors or aliases, duplicate keys refused, and every
// error a saker::policy::LoadError that reads "FILE:LINE:COLUMN: problem; expected ...".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "saker/policy.hpp"  // LoadError, LoadLimits
#include "sweep/command.hpp"

namespace saker::sweep {

using LoadError = saker::policy::LoadError;

// One dimension of the search space.
struct Param {
  enum class Kind { grid, choice, uniform, log_uniform, int_uniform };
  std::string name;
  Kind kind = Kind::grid;
  std::vector<std::string> values;  // grid, choice: the values as written
  double low = 0, high = 0;         // uniform, log_uniform, int_uniform (inclusive)
  bool sampled() const { return kind != Kind::grid; }
};
const char* kind_name(Param::Kind kind);

enum class Rule { none, asha, median };
const char* rule_name(Rule rule);

struct EarlyStopping {
  Rule rule = Rule::none;
  std::uint64_t min_steps = 0;  // the first rung's budget
  std::uint32_t reduction = 3;  // rung budgets grow by it; ASHA promotes the top 1/reduction
  std::uint32_t min_trials = 3; // median: other trials' results needed before stopping one
};

struct SlurmSide {
  std::uint32_t concurrency = 0;     // %N: trials running at once (0: Slurm's limit)
  std::vector<std::string> options;  // sbatch options, as words
  std::string datasets;              // "a,b@v2" for sbatch --dataset ("" none)
};

inline constexpr std::uint32_t kMaxTrials = 1000;  // Slurm's default MaxArraySize is 1001

struct Spec {
  std::string name;
  std::string file;                  // where it was loaded from (for messages)
  std::filesystem::path base;        // the sweep file's folder: relative paths and the jobs' cwd
  std::filesystem::path dir;         // the sweep's state directory (default_dir)
  std::filesystem::path checkpoints; // lineage root: <checkpoints>/<name>/trial-<id>
  std::vector<Param> space;
  std::uint64_t seed = 1;
  std::uint32_t samples = 1;         // random draws (per grid point)
  CommandTemplate command;
  std::string metric;
  bool maximize = false;
  std::uint64_t budget = 0;          // steps of a trial that runs to the end
  EarlyStopping stopping;
  SlurmSide slurm;

  std::size_t grid_size() const;     // product of the grid axes (1 without any)
  std::size_t trial_count() const { return grid_size() * samples; }
  // Steps at which trials are judged: min_steps * reduction^k below budget, then budget.
  // Without early stopping: {budget}.
  std::vector<std::uint64_t> rungs() const;
  std::filesystem::path lineage(std::size_t trial) const;
};

// The state directory of the sweep NAME in the file `file` without dir:, beside the file:
// NAME.sweep when the file is NAME.yaml (NAME.yml, NAME), else FILE.NAME.sweep (FILE: its
// name without .yaml or .yml). Keyed by the file and the name, so two sweep files never
// share one; saker-sweep also records the file in the directory (DIR/file) and refuses
// another's. (Before, it was NAME.sweep for every file: saker-sweep(1) says how such a
// directory is still resumed.)
std::filesystem::path default_dir(const std::filesystem::path& base, const std::string& file, const std::string& name);

// Throws LoadError (file:line:column) on anything wrong; `base` resolves relative paths
// (default: the file's folder). `state_dir`, when given, is the state directory whatever
// dir: says: a submitted sweep's frozen copy is loaded from its own directory.
Spec load_file(const std::string& path, const saker::policy::LoadLimits& limits = {});
Spec load_string(std::string_view text, const std::string& name, const std::filesystem::path& base,
                 const saker::policy::LoadLimits& limits = {}, const std::filesystem::path& state_dir = {});

}  // namespace saker::sweep
