#include "ckpt/hash_behind.hpp"

namespace saker::ckpt {

HashBehind::HashBehind() : helper_([this] { loop(); }) { sum_.emplace(); }

HashBehind::~HashBehind() {
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return queue_.empty() && !busy_; });
    stop_ = true;
  }
  work_.notify_one();
  helper_.join();
}

void HashBehind::reset() {
  wait_until_pending(0);
  sum_.emplace();
}

void HashBehind::add(const std::byte* p, std::size_t n, std::function<void()> then) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({p, n, std::move(then)});
  }
  work_.notify_one();
}

void HashBehind::wait_until_pending(std::size_t pieces) {
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return queue_.size() + (busy_ ? 1 : 0) <= pieces; });
}

hash::Digest128 HashBehind::digest() {
  wait_until_pending(0);
  return sum_->digest();
}

void HashBehind::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Piece piece = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    if (piece.n > 0) sum_->update(piece.p, piece.n);
    if (piece.then) piece.then();
    lock.lock();
    busy_ = false;
    done_.notify_all();
  }
}

}  // namespace saker::ckpt
