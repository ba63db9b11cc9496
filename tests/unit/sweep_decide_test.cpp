// Early-stopping decisions: ASHA with a 4-trial rung promotes exactly the best one
// whatever order the results arrive in; median stopping; the best trial.
#include <catch2/catch.hpp>

#include <algorithm>

#include "sweep/decide.hpp"
#include "sweep/report.hpp"

using namespace saker::sweep;

namespace {

Spec asha(bool maximize = false) {
  return load_string(std::string("version: 1\nname: a\ncommand: run {q} {budget}\nspace: {q: {grid: [1, 2, 3, 4]}}\n") +
                         "metric: {name: loss, goal: " + (maximize ? "maximize" : "minimize") + "}\n" +
                         "budget: {steps: 100}\nearly_stopping: {rule: asha, min_steps: 25, reduction: 4}\n",
                     "a.yaml", "/b");
}

std::vector<TrialState> trials(std::size_t n) {
  std::vector<TrialState> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i].id = i;
  return all;
}

// Records trial t's result at rung 0 and applies the verdict, as the worker does.
Verdict report(const Spec& s, std::vector<TrialState>& all, std::size_t t, double value) {
  all[t].results[0] = {25, value};
  const Decision d = judge(s, all, t, 0);
  all[t].state = d.verdict == Verdict::stop ? State::stopped : State::running;
  all[t].rung = d.verdict == Verdict::promote ? 1 : 0;
  return d.verdict;
}

}  // namespace

TEST_CASE("ASHA with a 4-trial rung promotes exactly the best, in any arrival order", "[sweep][decide]") {
  const Spec s = asha();
  REQUIRE(s.rungs() == std::vector<std::uint64_t>{25, 100});
  const std::vector<double> loss = {0.5, 0.2, 0.9, 0.4};  // trial 1 is the best
  std::vector<std::size_t> order = {0, 1, 2, 3};
  do {
    auto all = trials(4);
    std::vector<Verdict> v;
    for (std::size_t t : order) v.push_back(report(s, all, t, loss[t]));
    // Fewer than 4 results: floor(n/4) = 0 go on, so the first three stop.
    CHECK(std::count(v.begin(), v.begin() + 3, Verdict::stop) == 3);
    const auto next = next_promotion(s, all);
    if (order.back() == 1) {
      CHECK(v.back() == Verdict::promote);  // the best arrived last: it goes straight on
      CHECK_FALSE(next);
    } else {
      CHECK(v.back() == Verdict::stop);
      REQUIRE(next);
      CHECK(*next == 1);  // a free worker promotes the best stopped trial
      all[1].state = State::running;
      all[1].rung = 1;
      CHECK_FALSE(next_promotion(s, all));  // and only that one
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_CASE("ASHA: the top rung completes; maximize ranks the other way; ties go to the lower id", "[sweep][decide]") {
  const Spec s = asha(true);
  auto all = trials(4);
  for (std::size_t t = 0; t < 4; ++t) report(s, all, t, t == 2 ? 0.9 : 0.1);
  CHECK(*next_promotion(s, all) == 2);
  all[2].results[1] = {100, 0.95};
  CHECK(judge(s, all, 2, 1).verdict == Verdict::complete);
  auto ties = trials(4);
  for (std::size_t t = 0; t < 4; ++t) report(s, ties, t, 0.5);
  CHECK(*next_promotion(s, ties) == 0);
}

TEST_CASE("ASHA with 8 trials and reduction 2 promotes the top half as results come", "[sweep][decide]") {
  Spec s = asha();
  s.stopping.reduction = 2;
  s.stopping.min_steps = 25;
  REQUIRE(s.rungs() == std::vector<std::uint64_t>{25, 50, 100});
  auto all = trials(8);
  CHECK(report(s, all, 0, 0.5) == Verdict::stop);     // 1 result: none go on
  CHECK(report(s, all, 1, 0.4) == Verdict::promote);  // #1 of 2
  CHECK(report(s, all, 2, 0.9) == Verdict::stop);     // #3 of 3
  CHECK_FALSE(next_promotion(s, all));                // trial 0 is #2 of 3: one goes on
  CHECK(report(s, all, 3, 0.6) == Verdict::stop);     // #3 of 4: two go on ...
  REQUIRE(next_promotion(s, all));
  CHECK(*next_promotion(s, all) == 0);                // ... so now trial 0 does
}

TEST_CASE("median stopping stops a trial worse than the others' median once enough have reported", "[sweep][decide]") {
  Spec s = asha();
  s.stopping.rule = Rule::median;
  s.stopping.min_trials = 2;
  auto all = trials(4);
  CHECK(report(s, all, 0, 0.5) == Verdict::promote);  // no one to compare with
  CHECK(report(s, all, 1, 0.9) == Verdict::promote);  // 1 other < min_trials
  CHECK(report(s, all, 2, 0.8) == Verdict::stop);     // median of 0.5, 0.9 is 0.7: worse
  CHECK(judge(s, all, 2, 0).why.find("against the median 0.7 of 2 other trial(s)") != std::string::npos);
  CHECK(report(s, all, 3, 0.6) == Verdict::promote);  // median of 0.5 0.9 0.8 is 0.8: better
  CHECK_FALSE(next_promotion(s, all));  // median stopping never promotes later
}

TEST_CASE("the best trial is the best at the deepest rung reached", "[sweep][decide]") {
  const Spec s = asha();
  auto all = trials(4);
  CHECK_FALSE(best_trial(s, all));
  CHECK_FALSE(next_promotion(s, all));
  all[0].results[0] = {25, 0.1};  // best at rung 0, but stopped there
  all[1].results[0] = {25, 0.3};
  all[1].results[1] = {100, 0.2};
  all[3].results[0] = {25, 0.4};
  CHECK(*best_trial(s, all) == 1);
  CHECK(ranking(s, all) == std::vector<std::size_t>{1, 0, 3, 2});
}
