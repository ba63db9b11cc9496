// Early-stopping decisions, as pure functions of the trials' recorded rung results.
//
// Rungs are the budgets spec.rungs() lists. When a trial finishes rung k:
//  - ASHA (asynchronous successive halving): it goes on to rung k+1 if it is among the
//    best floor(n/reduction) of the n trials that have a result at rung k so far;
//    otherwise it stops there, and may still be promoted later, when more results
//    at rung k make it one of the best (next_promotion) -- ASHA never waits for a rung.
//  - median stopping: it stops if its result is worse than the median of the other
//    trials' results at rung k, once at least min_trials others have one.
//  - the last rung completes the trial.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sweep/spec.hpp"
#include "sweep/state.hpp"

namespace saker::sweep {

enum class Verdict { promote, stop, complete };

struct Decision {
  Verdict verdict = Verdict::complete;
  std::string why;
  // stop: whether it is for good. An ASHA stop is not when the trial can still become one
  // of the best floor(trials/reduction) at its rung as more results come in: it waits there,
  // and next_promotion takes it on if they put it in the top.
  bool final = true;
};

// `all` holds every trial, with `trial`'s result at `rung` already recorded.
Decision judge(const Spec& spec, const std::vector<TrialState>& all, std::size_t trial, std::size_t rung);

// ASHA: a stopped trial that the results now place among the best of its rung, deepest
// rung first, best first; nullopt when there is none (or the rule is not ASHA).
std::optional<std::size_t> next_promotion(const Spec& spec, const std::vector<TrialState>& all);

// Whether metric value a is better than b under the spec's goal.
bool better(const Spec& spec, double a, double b);

}  // namespace saker::sweep
