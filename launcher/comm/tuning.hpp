// How a rank drives its TCP links, chosen from what it measures about the machine it
// runs on instead of constants tuned on one machine. Nothing here changes a result:
// the reduction order is fixed by the ring's segments (see ring.hpp), whichever
// thread, poll or algorithm moves the bytes.
//
// What decides the TCP path's speed (profiled in saker-comm(3), PERFORMANCE): over
// loopback or a fast NIC every byte is copied by the kernel on both ends, so a rank is
// CPU-bound. A second thread for sends doubles a rank's copy rate only when a core is
// free for it; a busy-polling loop hides a ~50 us wake-up only while it does not take
// the core that another rank's copies need. Polling follows from how many ranks share
// this machine's cores; the send thread is timed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace saker::comm {

// Which of two ways of doing the same thing is faster here, per power-of-two size
// class, from the timings of this rank's own calls. After a cold first call and four
// calls with each, the faster one by the best of its last four timed calls: slow
// outliers from a busy machine do not count, a lasting change (placement, load) does
// within four calls; the other one is tried every 32nd call. Only for choices that
// never change a result and that ranks need not agree on.
class TimedChoice {
 public:
  bool second(std::size_t bytes) const;
  void record(std::size_t bytes, bool second, double seconds);

 private:
  struct Recent {
    std::array<double, 4> seconds_per_byte{};  // 0: not measured yet
    unsigned next = 0;
    double best() const;
  };
  struct Stats {
    Recent mode[2];  // first, second
    std::uint64_t calls = 0;
  };
  std::array<Stats, 65> by_size_{};
};

struct LinkPlan {
  // Large sends on a thread of their own: 1 or 0 forced, -1 measured per size class
  // (TimedChoice): on the 2-vCPU machine profiled it won 2-4x at 4 MiB, bound or not,
  // though the ranks had no spare core for it.
  int send_thread = -1;
  std::size_t busy_poll_bytes = 0;  // exchanges up to this size spin (yielding) before sleeping
  // Allreduces up to exchange_bytes take the one-step exchange (every rank gets every
  // buffer and reduces all of it), then up to direct_bytes the two-step direct
  // algorithm, larger ones the ring (2(n-1) steps); see ring.hpp. kCalibrate: measured
  // collectively on first use.
  std::size_t direct_bytes = kCalibrate;
  std::size_t exchange_bytes = kCalibrate;
  static constexpr std::size_t kCalibrate = ~std::size_t{0};
};

// CPUs online on this machine.
int cores_online();
// Identifies the running kernel (boot id): ranks with the same one share CPUs, even in
// different network namespaces or under different node names.
std::string machine_id();
// The plan for a rank on a machine with `online` CPUs running `ranks_here` ranks of
// this job. SAKER_COMM_SEND_THREAD (0/1), SAKER_COMM_BUSY_POLL_BYTES and
// SAKER_COMM_DIRECT_BYTES override the measured choices.
LinkPlan plan_links(int online, int ranks_here);

}  // namespace saker::comm
