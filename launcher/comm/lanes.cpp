#include "launcher/comm/lanes.hpp"

#include <algorithm>

namespace saker::comm {

Lanes::Lanes(int count) : count_(std::max(1, count)), errors_(static_cast<std::size_t>(count_)) {}

Lanes::~Lanes() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void Lanes::work(int lane) {
  std::uint64_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*job_)(lane);
    } catch (...) {
      errors_[static_cast<std::size_t>(lane)] = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void Lanes::run(const std::function<void(int)>& job) {
  if (count_ == 1) {
    job(0);
    return;
  }
  // Started here, not in the constructor: a rank that never splits a job keeps no threads.
  while (static_cast<int>(threads_.size()) < count_ - 1) {
    int lane = static_cast<int>(threads_.size()) + 1;
    threads_.emplace_back([this, lane] { work(lane); });
  }
  std::fill(errors_.begin(), errors_.end(), nullptr);
  job_ = &job;
  pending_.store(count_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);  // publishes job_ and pending_
  generation_.notify_all();
  try {
    job(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire))
    pending_.wait(left, std::memory_order_acquire);
  job_ = nullptr;
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace saker::comm
