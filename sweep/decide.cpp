#include "sweep/decide.hpp"

#include <algorithm>
#include <cstdio>

namespace saker::sweep {

bool better(const Spec& spec, double a, double b) { return spec.maximize ? a > b : a < b; }

namespace {

// Trials with a result at `rung`, best first (ties: the lower id).
std::vector<const TrialState*> ranked(const Spec& spec, const std::vector<TrialState>& all, std::size_t rung) {
  std::vector<const TrialState*> out;
  for (const TrialState& t : all)
    if (t.results.count(rung) != 0) out.push_back(&t);
  std::stable_sort(out.begin(), out.end(), [&](const TrialState* a, const TrialState* b) {
    return better(spec, a->results.at(rung).second, b->results.at(rung).second);
  });
  return out;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

}  // namespace

Decision judge(const Spec& spec, const std::vector<TrialState>& all, std::size_t trial, std::size_t rung) {
  const auto rungs = spec.rungs();
  if (rung + 1 >= rungs.size()) return {Verdict::complete, "ran its whole budget of " + std::to_string(spec.budget) + " steps"};
  const double value = all.at(trial).results.at(rung).second;
  const std::string at = " at rung " + std::to_string(rung) + " (" + std::to_string(rungs[rung]) + " steps)";
  if (spec.stopping.rule == Rule::asha) {
    const auto order = ranked(spec, all, rung);
    const std::size_t keep = order.size() / spec.stopping.reduction;
    const std::size_t place =
        static_cast<std::size_t>(std::find_if(order.begin(), order.end(), [&](const TrialState* t) { return t->id == trial; }) -
                                 order.begin());
    const std::string standing = spec.metric + " " + number(value) + " is #" + std::to_string(place + 1) + " of " +
                                 std::to_string(order.size()) + at + ", top " + std::to_string(keep) + " go on";
    if (place < keep) return {Verdict::promote, standing};
    // Every trial may reach rung 0 (fewer, deeper ones): at most all of them have a result there.
    const std::size_t keep_at_most = all.size() / spec.stopping.reduction;
    return {Verdict::stop, standing, place >= keep_at_most};
  }
  // Median stopping (Rule::none has a single rung and completed above).
  std::vector<double> others;
  for (const TrialState& t : all)
    if (t.id != trial && t.results.count(rung) != 0) others.push_back(t.results.at(rung).second);
  if (others.size() < spec.stopping.min_trials)
    return {Verdict::promote, "only " + std::to_string(others.size()) + " other result(s)" + at + ", " +
                                  std::to_string(spec.stopping.min_trials) + " needed to judge"};
  std::sort(others.begin(), others.end());
  const std::size_t n = others.size();
  const double median = n % 2 == 1 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
  const std::string standing = spec.metric + " " + number(value) + " against the median " + number(median) + " of " +
                               std::to_string(n) + " other trial(s)" + at;
  if (better(spec, median, value)) return {Verdict::stop, standing};
  return {Verdict::promote, standing};
}

std::optional<std::size_t> next_promotion(const Spec& spec, const std::vector<TrialState>& all) {
  if (spec.stopping.rule != Rule::asha) return std::nullopt;
  const auto rungs = spec.rungs();
  for (std::size_t rung = rungs.size() - 1; rung-- > 0;) {
    const auto order = ranked(spec, all, rung);
    const std::size_t keep = order.size() / spec.stopping.reduction;
    for (std::size_t i = 0; i < keep; ++i) {
      const TrialState& t = *order[i];
      if (t.state == State::stopped && t.rung == rung && t.results.count(rung + 1) == 0) return t.id;
    }
  }
  return std::nullopt;
}

}  // namespace saker::sweep
