// YAML -> Spec. Every problem is a LoadError naming FILE:LINE:COLUMN and what was
// expected; a sweep that loads is one saker-sweep can run to the end.
#include "sweep/spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>

#include "policies/yaml_doc.hpp"
#include "policies/yaml_reader.hpp"

namespace saker::sweep {

namespace yaml = saker::policy::yaml;
using yaml::Node;

const char* kind_name(Param::Kind kind) {
  switch (kind) {
    case Param::Kind::grid: return "grid";
    case Param::Kind::choice: return "choice";
    case Param::Kind::uniform: return "uniform";
    case Param::Kind::log_uniform: return "log_uniform";
    case Param::Kind::int_uniform: return "int_uniform";
  }
  return "?";
}

const char* rule_name(Rule rule) {
  switch (rule) {
    case Rule::none: return "none";
    case Rule::asha: return "asha";
    case Rule::median: return "median";
  }
  return "?";
}

std::size_t Spec::grid_size() const {
  std::size_t n = 1;
  for (const Param& p : space)
    if (!p.sampled()) n *= p.values.size();
  return n;
}

std::vector<std::uint64_t> Spec::rungs() const {
  std::vector<std::uint64_t> out;
  if (stopping.rule != Rule::none)
    for (std::uint64_t b = stopping.min_steps; b < budget; b *= stopping.reduction) out.push_back(b);
  out.push_back(budget);
  return out;
}

std::filesystem::path Spec::lineage(std::size_t trial) const {
  return checkpoints / name / ("trial-" + std::to_string(trial));
}

namespace {

constexpr int kSchemaVersion = 1;
constexpr std::uint64_t kMaxSteps = 1000000000000ull;

class Reader : public yaml::Reader {
 public:
  using yaml::Reader::Reader;

  // Sweep, parameter and metric names end up in file and job names: at most 64 characters.
  const std::string& name(const Node& n, const std::string& what) const { return yaml::Reader::name(n, what, 64); }

  std::uint64_t whole(const Node& n, const std::string& what, std::uint64_t low, std::uint64_t high) const {
    const std::string& s = scalar(n, what);
    const bool digits = s.size() <= 13 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    const std::uint64_t v = digits ? std::stoull(s) : 0;
    if (!digits || v < low || v > high)
      fail(n, "bad " + what + " '" + s + "'", "a whole number from " + std::to_string(low) + " to " + std::to_string(high));
    return v;
  }

  double number(const Node& n, const std::string& what) const {
    const std::string& s = scalar(n, what);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v)) fail(n, "bad " + what + " '" + s + "'", "a finite number");
    return v;
  }

  const std::vector<const Node*>& list(const Node& n, const std::string& what) const {
    expect(n, Node::Kind::sequence, what);
    if (n.items.empty()) fail(n, what + " is an empty list", "at least one entry");
    return n.items;
  }

};

Param param(const Reader& r, const Node& key, const Node& value) {
  Param p;
  p.name = r.name(key, "parameter name");
  if (std::any_of(p.name.begin(), p.name.end(), [](char c) { return c == '.' || c == '-'; }) ||
      kBuiltinPlaceholders.count(p.name) != 0)
    r.fail(key, "parameter name '" + p.name + "' cannot be a {placeholder}",
           "letters, digits and '_', other than budget, ckpt_dir, metrics, trial and sweep");
  const std::string what = "parameter " + p.name;
  auto f = r.fields(value, what, {"grid", "choice", "uniform", "log_uniform", "int_uniform"});
  if (f.size() != 1)
    r.fail(value, what + " needs exactly one distribution",
           "one of grid: [..], choice: [..], uniform: [lo, hi], log_uniform: [lo, hi], int_uniform: [lo, hi]");
  const auto& [kind, node] = *f.begin();
  const auto& items = r.list(*node, what + " " + kind);
  if (kind == "grid" || kind == "choice") {
    p.kind = kind == "grid" ? Param::Kind::grid : Param::Kind::choice;
    for (const Node* item : items) {
      const std::string& v = r.scalar(*item, what + " value");
      // Values become command-line words: no whitespace, nothing a reader could misread.
      if (std::any_of(v.begin(), v.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }) ||
          v.find_first_of("{}") != std::string::npos || v.size() > 256)
        r.fail(*item, "bad value '" + v + "' for " + what, "a value without spaces or braces, at most 256 bytes");
      if (std::find(p.values.begin(), p.values.end(), v) != p.values.end())
        r.fail(*item, "duplicate value '" + v + "' for " + what, "each value once");
      p.values.push_back(v);
    }
    return p;
  }
  p.kind = kind == "uniform" ? Param::Kind::uniform : kind == "log_uniform" ? Param::Kind::log_uniform
                                                                             : Param::Kind::int_uniform;
  if (items.size() != 2) r.fail(*node, what + " " + kind + " has " + std::to_string(items.size()) + " entries",
                                "[low, high]");
  p.low = r.number(*items[0], what + " low");
  p.high = r.number(*items[1], what + " high");
  if (!(p.low < p.high)) r.fail(*node, what + ": low " + items[0]->scalar + " is not below high " + items[1]->scalar,
                               "[low, high] with low < high");
  if (p.kind == Param::Kind::log_uniform && p.low <= 0)
    r.fail(*items[0], what + ": log_uniform needs a positive low, not " + items[0]->scalar, "0 < low < high");
  if (p.kind == Param::Kind::int_uniform &&
      (p.low != std::floor(p.low) || p.high != std::floor(p.high) || std::fabs(p.low) > 1e15 || std::fabs(p.high) > 1e15))
    r.fail(*node, what + ": int_uniform needs whole numbers", "[low, high] as integers");
  return p;
}

}  // namespace

std::filesystem::path default_dir(const std::filesystem::path& base, const std::string& file, const std::string& name) {
  std::string stem = std::filesystem::path(file).filename().string();
  for (const char* ext : {".yaml", ".yml"})
    if (stem.size() > std::strlen(ext) && stem.compare(stem.size() - std::strlen(ext), std::string::npos, ext) == 0) {
      stem.resize(stem.size() - std::strlen(ext));
      break;
    }
  return base / (stem == name || stem.empty() ? name + ".sweep" : stem + "." + name + ".sweep");
}

Spec load_string(std::string_view text, const std::string& name, const std::filesystem::path& base,
                 const saker::policy::LoadLimits& limits, const std::filesystem::path& state_dir) {
  const yaml::Document doc = yaml::Document::parse(text, name, limits);
  const Reader r(doc);
  Spec s;
  s.file = name;
  s.base = std::filesystem::absolute(base).lexically_normal();
  auto f = r.fields(doc.root(), "the sweep",
                    {"version", "name", "dir", "checkpoints", "command", "space", "search", "metric", "budget",
                     "early_stopping", "slurm"},
                    {"version", "name", "command", "space", "metric", "budget"});
  if (r.whole(*f["version"], "version", 0, 1000) != kSchemaVersion)
    r.fail(*f["version"], "unsupported sweep file version " + f["version"]->scalar,
           "version: " + std::to_string(kSchemaVersion));
  s.name = r.name(*f["name"], "sweep name");
  const auto path_of = [&](const char* key, const std::filesystem::path& fallback) {
    if (f.count(key) == 0) return fallback;
    return (s.base / r.scalar(*f[key], key)).lexically_normal();
  };
  s.dir = !state_dir.empty() ? std::filesystem::absolute(state_dir).lexically_normal()
                             : path_of("dir", default_dir(s.base, name, s.name));
  s.checkpoints = path_of("checkpoints", s.dir / "ckpt");

  // The space, in file order (the grid's order and the names' order in tables).
  const Node& space = *f["space"];
  r.expect(space, Node::Kind::mapping, "space");
  if (space.pairs.empty()) r.fail(space, "the space has no parameters", "at least one, e.g. lr: {log_uniform: [1e-4, 1e-1]}");
  for (const auto& [k, v] : space.pairs) s.space.push_back(param(r, *k, *v));

  if (f.count("search") != 0) {
    auto g = r.fields(*f["search"], "search", {"seed", "samples"});
    if (g.count("seed") != 0) s.seed = r.whole(*g["seed"], "search seed", 0, 9999999999999ull);
    if (g.count("samples") != 0) s.samples = static_cast<std::uint32_t>(r.whole(*g["samples"], "samples", 1, kMaxTrials));
    const bool any_sampled = std::any_of(s.space.begin(), s.space.end(), [](const Param& p) { return p.sampled(); });
    if (g.count("samples") != 0 && s.samples > 1 && !any_sampled)
      r.fail(*g["samples"], "samples: " + g["samples"]->scalar + " repeats every grid point (no parameter is sampled)",
             "samples: 1 for a grid, or a choice/uniform/log_uniform/int_uniform parameter");
  }
  if (s.trial_count() > kMaxTrials)
    r.fail(space, "the sweep has " + std::to_string(s.trial_count()) + " trials",
           "at most " + std::to_string(kMaxTrials) + " (one job array; Slurm's MaxArraySize)");

  // The metric.
  auto m = r.fields(*f["metric"], "metric", {"name", "goal"}, {"name"});
  s.metric = r.name(*m["name"], "metric name");
  if (s.metric == "step") r.fail(*m["name"], "'step' is the step counter, not a metric", "a metric such as eval_loss");
  if (m.count("goal") != 0) {
    const std::string& goal = r.scalar(*m["goal"], "metric goal");
    if (goal != "minimize" && goal != "maximize") r.fail(*m["goal"], "bad goal '" + goal + "'", "minimize or maximize");
    s.maximize = goal == "maximize";
  }

  auto b = r.fields(*f["budget"], "budget", {"steps"}, {"steps"});
  s.budget = r.whole(*b["steps"], "budget steps", 1, kMaxSteps);

  if (f.count("early_stopping") != 0) {
    const Node& node = *f["early_stopping"];
    auto e = r.fields(node, "early_stopping", {"rule", "min_steps", "reduction", "min_trials"}, {"rule", "min_steps"});
    const std::string& rule = r.scalar(*e["rule"], "early_stopping rule");
    if (rule == "asha") s.stopping.rule = Rule::asha;
    else if (rule == "median") s.stopping.rule = Rule::median;
    else if (rule != "none") r.fail(*e["rule"], "bad rule '" + rule + "'", "asha, median or none");
    s.stopping.min_steps = r.whole(*e["min_steps"], "min_steps", 1, kMaxSteps);
    if (s.stopping.min_steps >= s.budget)
      r.fail(*e["min_steps"], "min_steps " + std::to_string(s.stopping.min_steps) + " is not below the budget of " +
                                  std::to_string(s.budget) + " steps",
             "a first rung shorter than the whole budget");
    if (e.count("reduction") != 0) s.stopping.reduction = static_cast<std::uint32_t>(r.whole(*e["reduction"], "reduction", 2, 100));
    if (e.count("min_trials") != 0)
      s.stopping.min_trials = static_cast<std::uint32_t>(r.whole(*e["min_trials"], "min_trials", 1, kMaxTrials));
    if (s.stopping.rule == Rule::none) s.stopping = {};
  }

  // The command: a string split on whitespace, or a list of words.
  const Node& cmd = *f["command"];
  try {
    if (cmd.kind == Node::Kind::sequence) {
      std::vector<std::string> words;
      for (const Node* w : r.list(cmd, "command")) words.push_back(r.scalar(*w, "command word"));
      s.command = CommandTemplate::parse_words(words);
    } else {
      s.command = CommandTemplate::parse_string(r.scalar(cmd, "command"));
    }
  } catch (const LoadError&) {
    throw;
  } catch (const Error& e) {
    r.fail(cmd, std::string("bad command: ") + e.what(), "words with {placeholders}");
  }
  if (s.command.words().empty()) r.fail(cmd, "the command is empty", "a program and its arguments");
  const auto used = s.command.placeholders();
  for (const std::string& p : used)
    if (kBuiltinPlaceholders.count(p) == 0 &&
        std::none_of(s.space.begin(), s.space.end(), [&](const Param& q) { return q.name == p; }))
      r.fail(cmd, "the command uses {" + p + "}, which is not a parameter",
             "a parameter of space: or one of {budget} {ckpt_dir} {metrics} {trial} {sweep}");
  if (used.count("budget") == 0)
    r.fail(cmd, "the command has no {budget}", "the step count passed to the program, e.g. --steps {budget}");
  for (const Param& p : s.space)
    if (used.count(p.name) == 0)
      r.fail(cmd, "the command does not use parameter " + p.name + " (every trial would run the same)",
             "{" + p.name + "} in the command");

  if (f.count("slurm") != 0) {
    auto sl = r.fields(*f["slurm"], "slurm", {"concurrency", "options", "datasets"});
    if (sl.count("concurrency") != 0)
      s.slurm.concurrency = static_cast<std::uint32_t>(r.whole(*sl["concurrency"], "concurrency", 1, kMaxTrials));
    if (sl.count("options") != 0) {
      for (const Node* o : r.list(*sl["options"], "slurm options")) {
        const std::string& w = r.scalar(*o, "sbatch option");
        for (const char* own : {"-a", "--array", "--wrap", "--parsable", "-o", "--output", "-D", "--chdir"})
          if (w == own || w.rfind(std::string(own) + "=", 0) == 0 || (own[1] != '-' && w.rfind(own, 0) == 0))
            r.fail(*o, "sbatch option " + w + " is saker-sweep's to set",
                   "other options (saker-sweep sets --array, --output, --chdir, --parsable and the script)");
        if (w == "--dataset" || w.rfind("--dataset=", 0) == 0)
          r.fail(*o, "the datasets go under slurm: datasets:", "datasets: [name@version, ...]");
        s.slurm.options.push_back(w);
      }
    }
    if (sl.count("datasets") != 0) {
      std::vector<std::string> names;
      for (const Node* d : r.list(*sl["datasets"], "datasets")) names.push_back(r.scalar(*d, "dataset"));
      std::string joined;
      for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
      try {
        s.slurm.datasets = saker::policy::format_dataset_list(saker::policy::parse_dataset_list(joined));
      } catch (const Error& e) {
        r.fail(*sl["datasets"], std::string("bad datasets: ") + e.what(), "name or name@version entries");
      }
    }
  }
  return s;
}

Spec load_file(const std::string& path, const saker::policy::LoadLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path, 0, 0, "cannot open the sweep file", "a readable file (check the path and permissions)");
  std::string text(limits.max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw LoadError(path, 0, 0, "cannot read the sweep file", "a readable file");
  return load_string(text, path, std::filesystem::absolute(path).parent_path(), limits);
}

}  // namespace saker::sweep
