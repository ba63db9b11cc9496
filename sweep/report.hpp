// What `saker-sweep status|best|report` show: the trial table, the best trial, and the
// metric-against-step plot as a self-contained SVG (no plotting library).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sweep/metrics.hpp"
#include "sweep/spec.hpp"
#include "sweep/state.hpp"
#include "sweep/trials.hpp"

namespace saker::sweep {

struct Row {
  Trial trial;
  TrialState state;
  Metrics metrics;
  std::string checkpoint;  // newest checkpoint of the lineage ("-": none)
};

std::vector<TrialState> states_of(const std::vector<Row>& rows);

// The best trial: the best metric among the trials judged at the deepest rung any trial
// reached (a trial stopped early never beats one that ran further); ties: the lower id.
std::optional<std::size_t> best_trial(const Spec& spec, const std::vector<TrialState>& states);

// Trial ids best first: deepest rung first, then by metric; trials without results last.
std::vector<std::size_t> ranking(const Spec& spec, const std::vector<TrialState>& states);

// Columns: trial, each parameter, state, rung, steps, the metric (its last report) and
// the checkpoint; `order` picks the rows and their order; the best trial is marked '*'.
std::string table(const Spec& spec, const std::vector<Row>& rows, const std::vector<std::size_t>& order);

// `metric` against step for every trial that reported it: one line per trial, stopped
// trials dashed, the best one thick, a legend with the parameters. The title says which way
// is better only where that is known: `maximize` when given, else the sweep's goal for its
// own metric; another metric's title says nothing of it.
std::string svg_plot(const Spec& spec, const std::vector<Row>& rows, const std::string& metric,
                     std::optional<bool> maximize = std::nullopt);

// The metric names the trials' metrics files report, sorted.
std::vector<std::string> reported_metrics(const std::vector<Row>& rows);

}  // namespace saker::sweep
