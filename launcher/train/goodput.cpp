#include "launcher/train/goodput.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::train {

double daly_interval(double delta_s, double mtbf_s) {
  SAKER_ASSERT(delta_s >= 0 && mtbf_s > 0, "daly_interval needs δ >= 0 and M > 0");
  if (delta_s >= 2 * mtbf_s) return mtbf_s;
  const double x = delta_s / (2 * mtbf_s);
  return std::sqrt(2 * delta_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - delta_s;
}

std::uint64_t interval_steps(double tau_s, double step_s) {
  if (!(step_s > 0) || !(tau_s > 0)) return 1;
  const double steps = std::round(tau_s / step_s);
  if (!(steps < static_cast<double>(kMaxIntervalSteps))) return kMaxIntervalSteps;
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(steps));
}

std::string IntervalChoice::line() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "checkpoint every %llu steps (τ=%.3g s from δ=%.3g s, M=%.0f s from ",
                static_cast<unsigned long long>(steps), tau_s, delta_s, mtbf_s);
  char tail[64];
  std::snprintf(tail, sizeof tail, "; a step takes %.3g s)", step_s);
  return buf + mtbf_source + tail;
}

double AutoInterval::wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

AutoInterval::AutoInterval(AutoIntervalOptions options, Reducer& reducer, FailureHistory* history, Clock clock,
                           Say say)
    : options_(options), reducer_(reducer), history_(history), clock_(std::move(clock)), say_(std::move(say)) {
  if (options_.probe_steps == 0) options_.probe_steps = 1;
  if (!say_) say_ = [](const std::string& line) {
    std::printf("saker-train: %s\n", line.c_str());
    std::fflush(stdout);
  };
}

bool AutoInterval::due(std::uint64_t step) {
  if (!started_) {
    // The first step after a start (or resume) is where measuring begins: what came
    // before it (loading, rendezvous, resuming) is not a step's cost.
    started_ = true;
    first_step_ = step;
    first_time_ = reducer_.rank() == 0 ? clock_() : 0;
    next_ = step + options_.probe_steps;
  }
  return step >= next_;
}

IntervalChoice AutoInterval::decide(std::uint64_t step, double now) const {
  IntervalChoice c;
  c.delta_s = save_seconds_ / saves_;
  c.step_s = std::max(1e-9, (now - first_time_ - save_seconds_) / static_cast<double>(step - first_step_));
  if (options_.mtbf_s > 0) {
    c.mtbf_s = options_.mtbf_s;
    c.mtbf_source = "--mtbf";
  } else if (history_ != nullptr) {
    const MtbfEstimate m = history_->estimate(now);
    c.mtbf_s = m.seconds;
    c.mtbf_source = m.source;
  } else {
    c.mtbf_s = FailureHistory::kPriorMtbfSeconds;
    c.mtbf_source = "the prior of one interruption an hour (no failure history)";
  }
  c.tau_s = daly_interval(c.delta_s, c.mtbf_s);
  c.steps = interval_steps(c.tau_s, c.step_s);
  return c;
}

void AutoInterval::saved(std::uint64_t step, double seconds) {
  if (!started_) due(step);
  // A run that ends on its first measured step has nothing to decide; every rank knows
  // it from the step numbers alone, so none enters the allreduce below.
  if (step <= first_step_) return;
  float steps = 0;
  if (reducer_.rank() == 0) {
    const double before = clock_();
    if (history_ != nullptr) {
      history_->alive(before);
      try {
        history_->write();
      } catch (const Error& e) {
        if (!history_warned_) log::warn(std::string("saker-train: ") + e.what() + "; M keeps this process's view");
        history_warned_ = true;
      }
    }
    const double now = clock_();
    save_seconds_ += seconds + (now - before);  // the history's update is part of a save's cost
    ++saves_;
    IntervalChoice c = decide(step, now);
    const bool first = !choice_;
    const double change = first ? 1.0 : std::fabs(static_cast<double>(c.steps) - static_cast<double>(choice_->steps)) /
                                             static_cast<double>(choice_->steps);
    if (first || change > options_.hysteresis) {
      say_(c.line());
      choice_ = std::move(c);
    }
    steps = static_cast<float>(choice_->steps);
  }
  // Rank 0's choice reaches every rank: the others add zeros. Exact (at most 2^24).
  reducer_.allreduce_sum(std::span<float>(&steps, 1));
  interval_ = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(steps));
  next_ = step + interval_;
}


CkptEvery parse_ckpt_every(const std::string& text) {
  if (text == "auto") return {true, 0};
  std::size_t used = 0;
  unsigned long long steps = 0;
  try {
    if (!text.empty() && text[0] != '-' && text[0] != '+') steps = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) {
    throw Error(explain("--ckpt-every '" + text + "' is not a number of steps nor 'auto'",
                        "it takes a whole number (0: only emergency checkpoints) or auto",
                        "pass e.g. --ckpt-every 50 or --ckpt-every auto"));
  }
  return {false, static_cast<std::uint64_t>(steps)};
}

GoodputSession::GoodputSession(double mtbf_s, const std::string& ckpt_dir, Reducer& reducer, bool restarted) {
  if (reducer.rank() == 0) {
    history_ = std::make_unique<FailureHistory>(ckpt_dir + "/" + FailureHistory::kFileName);
    if (const std::string warning = history_->load(); !warning.empty()) log::warn("saker-train: " + warning);
    const double now = AutoInterval::wall_seconds();
    history_->begin(now, restarted);
    try {
      history_->write();
    } catch (const Error& e) {
      log::warn(std::string("saker-train: ") + e.what() + "; M keeps this process's view");
    }
    const std::string m = mtbf_s > 0 ? "M comes from --mtbf" : "M comes from this history";
    std::printf("saker-train: --ckpt-every auto: failure history %s: %s. %s; the first checkpoint comes %llu steps "
                "after the first step, to measure its cost δ\n",
                history_->path().c_str(), history_->summary(now).c_str(), m.c_str(),
                static_cast<unsigned long long>(AutoIntervalOptions{}.probe_steps));
    std::fflush(stdout);
  }
  AutoIntervalOptions options;
  options.mtbf_s = mtbf_s;
  interval_ = std::make_unique<AutoInterval>(options, reducer, history_.get());
}

void GoodputSession::finished(bool stopped) {
  if (history_ == nullptr) return;
  history_->end(AutoInterval::wall_seconds(), stopped);
  try {
    history_->write();
  } catch (const Error& e) {
    log::warn(std::string("saker-train: ") + e.what() + "; the next attempt counts this one as interrupted");
  }
}

}  // namespace saker::train
