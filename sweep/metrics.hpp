// The per-trial metrics file, written by the trial's program and read by saker-sweep
// (format in saker-sweep(1), METRICS FILE): one report per line,
//   step=120 loss=0.5123 eval_loss=0.4901
// `step` first (a whole number), then name=value pairs (finite numbers). Lines are
// appended; a step reported twice (a run resumed from a checkpoint repeats the steps
// after it) keeps its last report; '#' lines and blank lines are ignored; a last line
// without its newline is still being written and is not read yet.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace saker::sweep {

using Series = std::map<std::uint64_t, double>;  // step -> value

struct Metrics {
  std::map<std::string, Series> series;  // metric name -> its points
  std::vector<std::string> problems;     // "line N: why", for lines that were skipped
  std::uint64_t last_step = 0;           // the highest step reported (0: none)
};

Metrics parse_metrics(std::string_view text);
// A missing file reads as no metrics (the trial has not reported yet).
Metrics read_metrics(const std::string& path);

// The value a trial had at `budget`: its last report at or before that step.
std::optional<std::pair<std::uint64_t, double>> value_at(const Series& series, std::uint64_t budget);

}  // namespace saker::sweep
