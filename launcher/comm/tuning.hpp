// How a rank drives its TCP links, chosen from what it measures about the machine it
// runs on instead of constants tuned on one machine. Nothing here changes a result:
// the reduction order is fixed by the ring's segments (see ring.hpp), whichever
// thread, poll or algorithm moves the bytes.
//
// What decides the TCP path's speed (profiled in saker-comm(3), PERFORMANCE): over
// loopback or a fast NIC every byte is copied by the kernel on both ends, so a rank is
// CPU-bound. A second thread for sends doubles a rank's copy rate only when a core is
// free for it; a busy-polling loop hides a ~50 us wake-up only while it does not take
// the core that another rank's copies need. So both follow from how many cores this
// process may use and how many ranks share this machine.
#pragma once

#include <cstddef>
#include <string>

namespace saker::comm {

struct LinkPlan {
  bool send_thread = false;         // large sends on their own thread
  std::size_t busy_poll_bytes = 0;  // exchanges up to this size spin (yielding) before sleeping
  // Allreduces up to exchange_bytes take the one-step exchange (every rank gets every
  // buffer and reduces all of it), then up to direct_bytes the two-step direct
  // algorithm, larger ones the ring (2(n-1) steps); see ring.hpp. kCalibrate: measured
  // collectively on first use.
  std::size_t direct_bytes = kCalibrate;
  std::size_t exchange_bytes = kCalibrate;
  static constexpr std::size_t kCalibrate = ~std::size_t{0};
};

// CPUs this process may run on (its affinity mask; 1 when bound to a core).
int cores_available();
// CPUs online on this machine.
int cores_online();
// Identifies the running kernel (boot id): ranks with the same one share CPUs, even in
// different network namespaces or under different node names.
std::string machine_id();
// The plan for a rank that may use `mine` of the machine's `online` CPUs, on a machine
// running `ranks_here` ranks of this job. SAKER_COMM_SEND_THREAD (0/1), SAKER_COMM_BUSY_POLL_BYTES and
// SAKER_COMM_DIRECT_BYTES override the measured choices.
LinkPlan plan_links(int mine, int online, int ranks_here);

}  // namespace saker::comm
