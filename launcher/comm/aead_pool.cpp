#include "launcher/comm/aead_pool.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/error.hpp"

namespace saker::comm::aead {

CryptoPool::~CryptoPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CryptoPool::submit(Job& job) {
  {
    std::lock_guard lock(mu_);
    if (threads_.empty())
      for (int i = 0; i < helpers_; ++i) threads_.emplace_back([this] { loop(); });
    queue_.push_back(&job);
  }
  cv_.notify_one();
}

void CryptoPool::forget(const void* owner) {
  std::lock_guard lock(mu_);
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [owner](Job* j) { return j->owner == owner; }), queue_.end());
}

void CryptoPool::loop() {
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      // Claimed under the lock: once forget() has run, no helper holds a job of that
      // owner that it has not claimed, so the owner can free what it has cancelled.
      for (; !queue_.empty() && !job; queue_.pop_front())
        if (queue_.front()->claim()) job = queue_.front();
    }
    if (job) job->run_claimed();
  }
}

int crypto_threads(int ranks_here) {
  if (const char* v = std::getenv("SAKER_COMM_CRYPTO_THREADS")) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 64)
      throw Error(explain(std::string("SAKER_COMM_CRYPTO_THREADS='") + v + "' is not a thread count from 1 to 64",
                          "it sets how many threads seal and open a channel's frames under transit encrypt "
                          "(1: the ring's own threads alone)",
                          "set a number from 1 to 64, or unset it for the CPUs this rank may use"));
    return static_cast<int>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  const int online = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
  const int cpus = mine < online ? mine : online / std::max(1, ranks_here);
  return std::clamp(cpus, 1, 8);
}

}  // namespace saker::comm::aead
