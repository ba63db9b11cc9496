#include "launcher/train/progress.hpp"

#include <cstdio>

namespace saker::train {

Progress::Progress(std::uint64_t total_steps, std::uint64_t samples_per_step, std::uint64_t first_step)
    : total_(total_steps), samples_per_step_(samples_per_step), first_step_(first_step), window_step_(first_step),
      start_(Clock::now()), window_start_(start_) {}

std::string Progress::line(std::uint64_t step, double loss, double accuracy) {
  const auto now = Clock::now();
  const double window_s = std::chrono::duration<double>(now - window_start_).count();
  const double since_start = std::chrono::duration<double>(now - start_).count();
  const double rate = window_s > 0 ? static_cast<double>((step - window_step_) * samples_per_step_) / window_s : 0;
  const double per_step = step > first_step_ ? since_start / static_cast<double>(step - first_step_) : 0;
  const double eta = per_step * static_cast<double>(total_ > step ? total_ - step : 0);
  window_step_ = step;
  window_start_ = now;
  char text[200];
  std::snprintf(text, sizeof text, "saker-train: step %llu/%llu loss %.4f acc %.3f samples/s %.0f eta %.1fs",
                static_cast<unsigned long long>(step), static_cast<unsigned long long>(total_), loss, accuracy, rate, eta);
  return text;
}

}  // namespace saker::train
