#include "launcher/train/progress.hpp"

#include <unistd.h>

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

CountProgress::CountProgress(std::string what, std::string unit, bool forced)
    : what_(std::move(what)), unit_(std::move(unit)), terminal_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {
  enabled_ = forced || terminal_;
}

void CountProgress::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_) return;
  const auto now = Clock::now();
  const bool last = done >= total;
  if (!last && last_ != Clock::time_point{} && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  // On a terminal the line is rewritten in place; in a log each update is its own line.
  std::fprintf(stderr, "%s%s: %llu/%llu %s (%.0f%%), eta %.1fs%s", terminal_ ? "\r" : "", what_.c_str(),
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), unit_.c_str(),
               total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0, eta,
               terminal_ && !last ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace saker::train
