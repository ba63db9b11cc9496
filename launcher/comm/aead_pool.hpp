// Helper threads that seal and open a communicator's frames in parallel (Transit::encrypt;
// saker-comm(3), ENCRYPTION IN TRANSIT). One core seals or opens AES-256-GCM at about
// 5.5 GB/s, and a 2-rank ring seals and opens every byte it moves: on one thread that is
// slower than the plaintext ring. Frames of one direction are independent (frame k's
// nonce is its sequence number, known before anything is sealed), so helpers can seal
// frames k+1.. while frame k is on the wire, and open frames while later ones arrive;
// the owner (the ring's sender or receiver) still puts them on the wire, and passes
// them on, strictly in sequence order, so replay, reordering and truncation are
// detected exactly as on one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace saker::comm::aead {

// One frame's sealing or opening, run by exactly one thread: whichever claims it first,
// a helper or the owner that needs it next.
struct Job {
  enum : unsigned { kFree, kPending, kClaimed, kDone };
  std::atomic<unsigned> state{kFree};
  const void* owner = nullptr;      // the SealedSender or SealedReceiver it belongs to
  void (*work)(Job&) = nullptr;     // does the job; records a failure in the job itself

  bool claim() {
    unsigned pending = kPending;
    return state.compare_exchange_strong(pending, kClaimed, std::memory_order_acq_rel);
  }
  bool done() const { return state.load(std::memory_order_acquire) == kDone; }
  void run_claimed() {
    work(*this);
    state.store(kDone, std::memory_order_release);
    state.notify_all();
  }
  // Runs it here if no helper has started it, else waits until the helper is done.
  void complete() {
    if (claim()) return run_claimed();
    for (unsigned s; (s = state.load(std::memory_order_acquire)) == kClaimed;) state.wait(kClaimed, std::memory_order_acquire);
  }
};

class CryptoPool {
 public:
  // helpers: threads besides the owners (started on the first job).
  explicit CryptoPool(int helpers) : helpers_(helpers) {}
  ~CryptoPool();
  CryptoPool(const CryptoPool&) = delete;
  CryptoPool& operator=(const CryptoPool&) = delete;
  int helpers() const { return helpers_; }
  // Offers a job in state kPending to the helpers; the owner may still claim it first.
  void submit(Job& job);
  // Drops owner's offered jobs: afterwards no helper starts one of them (those already
  // started run to the end). The owner calls it before it reuses or frees their memory.
  void forget(const void* owner);

 private:
  void loop();

  const int helpers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;  // may hold jobs already claimed by their owner (skipped)
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Threads that seal and open at once for one communicator channel: the ring's own plus
// this minus one helpers. SAKER_COMM_CRYPTO_THREADS (1..64) if set (a bad value throws,
// naming it and the fix), else the CPUs this rank may use, at most 8: its affinity mask
// where that is narrower than the machine (a pinned rank), else its share of the online
// CPUs among the job's ranks_here ranks on this machine.
int crypto_threads(int ranks_here);

}  // namespace saker::comm::aead
