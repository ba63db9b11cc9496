// `saker-train --ckpt-every auto`: the checkpoint interval that loses the least time to
// saving and to redoing work after an interruption, by Young and Daly, from the measured
// save cost δ, the mean time between interruptions M (--mtbf, or this job's failure
// history) and the measured step time. Re-decided after every save, as the measurements
// change; rank 0 measures and decides, and one allreduce gives every rank its choice,
// so every rank checkpoints at the same steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/train/goodput_history.hpp"
#include "launcher/train/trainer.hpp"

namespace saker::train {

// The compute time between two checkpoints, in seconds, for a save that costs delta_s
// and interruptions every mtbf_s on average: Daly's higher-order estimate (J. T. Daly,
// "A higher order estimate of the optimum checkpoint interval for restart dumps", 2006)
//   τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ   for δ < 2M, else M,
// whose first term is Young's sqrt(2δM).
double daly_interval(double delta_s, double mtbf_s);

// τ in whole steps of step_s seconds: at least 1, at most kMaxIntervalSteps (exact in the
// float that carries it to the other ranks).
inline constexpr std::uint64_t kMaxIntervalSteps = std::uint64_t{1} << 24;
std::uint64_t interval_steps(double tau_s, double step_s);

struct AutoIntervalOptions {
  double mtbf_s = 0;               // --mtbf; 0: from the failure history
  std::uint64_t probe_steps = 10;  // steps from the start to the first save, which measures δ
  // A new choice replaces the current one only when it differs by more than this
  // fraction: the measurements wobble, and each change is printed.
  double hysteresis = 0.1;
};

// One decision, as printed: "checkpoint every 37 steps (τ=18.2 s from δ=0.41 s, M=400 s
// from --mtbf; a step takes 0.492 s)".
struct IntervalChoice {
  std::uint64_t steps = 0;
  double tau_s = 0, delta_s = 0, mtbf_s = 0, step_s = 0;
  std::string mtbf_source;
  std::string line() const;
};

class AutoInterval {
 public:
  using Clock = std::function<double()>;              // seconds (wall clock: the history spans processes)
  using Say = std::function<void(const std::string&)>;  // rank 0's lines
  static double wall_seconds();

  // `history`: rank 0's failure history (kept alive at every save; M comes from it
  // unless options.mtbf_s is set), or null; other ranks pass null, and their
  // measurements are not used.
  AutoInterval(AutoIntervalOptions options, Reducer& reducer, FailureHistory* history, Clock clock = wall_seconds,
               Say say = nullptr);

  // After every step, on every rank: whether to checkpoint now. Depends only on the
  // step numbers and the broadcast choices, so every rank answers alike.
  bool due(std::uint64_t step);
  // After every periodic (or final) save, on every rank, with the seconds it took:
  // collective (one allreduce of one float).
  void saved(std::uint64_t step, double seconds);

  std::uint64_t interval() const { return interval_; }     // 0 until the first save
  const std::optional<IntervalChoice>& choice() const { return choice_; }  // rank 0 only

 private:
  IntervalChoice decide(std::uint64_t step, double now) const;

  AutoIntervalOptions options_;
  Reducer& reducer_;
  FailureHistory* history_;
  Clock clock_;
  Say say_;
  bool started_ = false;
  std::uint64_t first_step_ = 0, next_ = 0, interval_ = 0;
  double first_time_ = 0, save_seconds_ = 0;
  int saves_ = 0;
  bool history_warned_ = false;
  std::optional<IntervalChoice> choice_;
};


// --ckpt-every's value: "auto", or a whole number of steps (0: only on signals).
// Throws saker::Error naming the value otherwise.
struct CkptEvery {
  bool automatic = false;
  std::uint64_t steps = 0;
};
CkptEvery parse_ckpt_every(const std::string& text);

// What --ckpt-every auto adds to one saker-train process: rank 0's failure history in
// the checkpoint directory (this attempt's line written at the start, kept alive at
// every save, closed at the end) and the interval decision. Constructed on every rank,
// after the checkpoint store (which made the directory).
class GoodputSession {
 public:
  // mtbf_s: --mtbf (0: from the history). restarted: restarted_from_env(...).
  GoodputSession(double mtbf_s, const std::string& ckpt_dir, Reducer& reducer, bool restarted);
  AutoInterval& interval() { return *interval_; }
  // Marks this attempt's end: stopped by a signal (an interruption the next attempt
  // counts) or done.
  void finished(bool stopped);

 private:
  std::unique_ptr<FailureHistory> history_;  // rank 0 only
  std::unique_ptr<AutoInterval> interval_;
};

}  // namespace saker::train
