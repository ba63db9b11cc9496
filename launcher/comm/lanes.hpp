// Lanes: one job split over a few threads of a rank, for copies and reductions that
// one core cannot feed. On a server one core moves 10-20 GB/s of memory, far below what
// the socket can; a 64 MiB allreduce through /dev/shm took 17.5-21 ms on a 16-core
// H200 host against 7-10 ms on this project's 2-vCPU guest.
//
// run(job, lanes) calls job(0) on the caller's thread and job(1)..job(lanes-1) on threads
// started on first use (lanes: at most count(); all by default), and returns once every
// one has returned; then it rethrows the first lane's error, if any (after all have
// stopped, so no lane still touches the caller's buffers). Each thread has its own wake-up
// word, so a job on fewer lanes wakes no other thread. A wake-up goes through a futex (std::atomic::wait, ~5-50 us), so a
// job is worth splitting only when each lane has hundreds of microseconds of work.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace saker::comm {

class Lanes {
 public:
  explicit Lanes(int count);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  int count() const { return count_; }
  void run(const std::function<void(int lane)>& job, int lanes = 0);

 private:
  void work(int lane);

  struct alignas(64) Wake {
    std::atomic<std::uint64_t> jobs{0};  // one more per job given to this lane's thread
  };

  int count_;
  std::vector<std::thread> threads_;   // threads_[i] runs lane i + 1
  std::unique_ptr<Wake[]> wake_;       // wake_[lane], for lanes 1..count-1
  const std::function<void(int)>* job_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::atomic<int> pending_{0};        // helper lanes still running the job
  std::atomic<bool> stopping_{false};
};

}  // namespace saker::comm
