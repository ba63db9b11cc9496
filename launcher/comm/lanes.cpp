#include "launcher/comm/lanes.hpp"

#include <algorithm>

namespace saker::comm {

Lanes::Lanes(int count)
    : count_(std::max(1, count)), wake_(std::make_unique<Wake[]>(static_cast<std::size_t>(count_))),
      errors_(static_cast<std::size_t>(count_)) {}

Lanes::~Lanes() {
  stopping_.store(true, std::memory_order_release);
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    Wake& w = wake_[i + 1];
    w.jobs.fetch_add(1, std::memory_order_release);
    w.jobs.notify_one();
  }
  for (auto& t : threads_) t.join();
}

void Lanes::work(int lane) {
  Wake& w = wake_[static_cast<std::size_t>(lane)];
  std::uint64_t seen = 0;
  for (;;) {
    w.jobs.wait(seen, std::memory_order_acquire);
    seen = w.jobs.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*job_)(lane);
    } catch (...) {
      errors_[static_cast<std::size_t>(lane)] = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void Lanes::run(const std::function<void(int)>& job, int lanes) {
  const int used = lanes <= 0 ? count_ : std::min(lanes, count_);
  if (used == 1) {
    job(0);
    return;
  }
  // Started here, not in the constructor: a rank that never splits a job keeps no threads.
  while (static_cast<int>(threads_.size()) < used - 1) {
    int lane = static_cast<int>(threads_.size()) + 1;
    threads_.emplace_back([this, lane] { work(lane); });
  }
  std::fill(errors_.begin(), errors_.end(), nullptr);
  job_ = &job;
  pending_.store(used - 1, std::memory_order_relaxed);
  for (int lane = 1; lane < used; ++lane) {
    Wake& w = wake_[static_cast<std::size_t>(lane)];
    w.jobs.fetch_add(1, std::memory_order_release);  // publishes job_ and pending_
    w.jobs.notify_one();
  }
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
