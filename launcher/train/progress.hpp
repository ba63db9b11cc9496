// Progress lines of saker-train: step, loss, accuracy, samples/s over the last window
// and the ETA from the average step time since this process started.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace saker::train {

class Progress {
 public:
  Progress(std::uint64_t total_steps, std::uint64_t samples_per_step, std::uint64_t first_step);
  // "saker-train: step 120/400 loss 0.5123 acc 0.812 samples/s 10240 eta 3.1s"
  std::string line(std::uint64_t step, double loss, double accuracy);

 private:
  using Clock = std::chrono::steady_clock;
  std::uint64_t total_, samples_per_step_, first_step_, window_step_;
  Clock::time_point start_, window_start_;
};

// "saker-train: make-data: 40960/81920 rows (50%), eta 1.2s" for work that takes more
// than a moment: rewritten in place on a terminal (stderr), silent otherwise (batch logs)
// unless `forced` (--progress). At most ~5 updates a second.
class CountProgress {
 public:
  CountProgress(std::string what, std::string unit, bool forced);
  void update(std::uint64_t done, std::uint64_t total);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  bool enabled_, terminal_;
  Clock::time_point start_, last_{};
};

}  // namespace saker::train
