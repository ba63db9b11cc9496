// The shared-memory segment's layout that ShmGroup's files share (shm.cpp: the
// collectives; shm_barrier.cpp: the barrier; shm_segment.cpp: making and checking the
// segment): each lane's flags, one cache line per member, then its slot sets.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace saker::comm::shm_layout {

constexpr std::size_t kLine = 64;
constexpr std::size_t kMaxLocal = 256;
// The most a barrier busy-waits before it yields, when every member may have a CPU of its
// own. A yield on a busy machine can hand the core to another process for a time slice
// (ms) where the peer was a few microseconds away. Each lane learns how long to spin from
// how late its peers actually arrived (SpinBudget, shm.hpp).
constexpr std::int64_t kSpinCapNs = 50'000;

// The most a member moves through its slot per barrier in a large allreduce (a piece),
// alltoall or reduce-scatter (a share per peer) or allgather, where the slot is larger
// (2 MiB for 2 ranks). A round's working set on each rank, its bytes in the caller's
// buffers, its slot and the parts it reads from the peers' slots, is a few times that: at
// 512 KiB it stays in a core's L2 from the copy in to the copy out, where a whole slot went
// out to L3 and back. Measured here (2 ranks, 1 MiB L2 each): allreduce 16+48+32 MiB back
// to back 10.5-10.9 -> 8.1-8.6 ms (256 KiB: ~9.4, more barriers); pinned C++
// bench_collectives, 2 runs each, alltoall 64 MiB 5.1-5.4 -> 5.9-6.1 GB/s, 16 MiB
// 6.1-6.3 -> 6.5-6.6, reduce-scatter 16 MiB 8.0-8.2 -> 10.0-10.4, allgather 16 MiB
// 5.6-5.9 -> 6.2-7.2. A constant: every member must cut the same rounds.
constexpr std::size_t kRoundBytes = 512 * 1024;

// A member's arrival at a barrier: the phase it reached, when (CLOCK_MONOTONIC, the same
// clock in every process of the machine), which its peers learn their spin from, and on
// which CPU. The time goes by the phase's parity: a member that left barrier p may store
// its time for p+1 while a peer still reads p's, but cannot reach p+2 before that peer left p.
struct alignas(kLine) Flag {
  std::atomic<std::uint64_t> phase;
  std::atomic<std::int64_t> arrived_ns[2];
  std::atomic<int> cpu;
  std::atomic<std::uint32_t> seq;      // futex word: bumped at each arrival
  std::atomic<std::uint32_t> sleepers;  // peers asleep on seq
  char pad[kLine - sizeof(std::atomic<std::uint64_t>) - 2 * sizeof(std::atomic<std::int64_t>) - sizeof(std::atomic<int>) -
           2 * sizeof(std::atomic<std::uint32_t>)];
};

inline std::size_t header_bytes() { return kMaxLocal * sizeof(Flag); }

}  // namespace saker::comm::shm_layout
