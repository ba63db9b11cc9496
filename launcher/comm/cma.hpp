// Single-copy transfers between the ranks of one node (cross-memory attach: the kernel's
// process_vm_readv copies straight from a peer's buffer into ours).
//
// Through the /dev/shm segment every byte of an alltoall or allgather is copied twice (into
// the sender's slot, out into the receiver's buffer); OpenMPI's shared-memory transport
// copies large messages once, with this same call. So, for the sizes asked for or timed faster
// (State::use, State::timed; cma.cpp says why), a member publishes, in its slot, where its blocks lie in its own memory, and every member
// pulls exactly the bytes it agreed to receive (agree.hpp) into its receive buffer.
//
// Who can read whom: the kernel lets a process read another's memory only with ptrace
// rights over it (same uid and not made non-dumpable, Yama's ptrace_scope, seccomp and
// container policies permitting). The ranks of a job share a uid, and the segment (mode
// 0600, shm.hpp) is reachable only by that uid: another user gains nothing here. What a
// peer publishes (its pid, its addresses) is untrusted: it only chooses which bytes of a
// process of the same user arrive (bytes that peer could read and send itself), never how
// many (our agreed counts) or where they land (our receive buffer).
//
// Whether the group uses it is decided once at set-up, the same on every member: each
// member reads a fresh random word every peer published the address of, and the group
// uses single copy only if every member read every peer's word right and none turned it
// off (SAKER_COMM_CMA=0). A read that fails later (a peer's bad address, a process made
// non-dumpable since) fails that call's single-copy step on that member only; every
// member learns it in the closing barrier, the whole call reruns through the segment, and
// the group never tries single copy again.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "launcher/comm/tuning.hpp"

namespace saker::comm::cma {

// Reads exactly `bytes` at `remote` in process pid into local. False when the kernel
// refused (EPERM, ENOSYS, ESRCH, EFAULT) or could not read it all; never reads more.
bool pull(pid_t pid, std::uint64_t remote, void* local, std::size_t bytes) noexcept;

// Process-wide counts, for tests and diagnostics: reads that succeeded, and failed.
struct Counters {
  std::atomic<std::uint64_t> pulls{0}, failures{0};
};
Counters& counters();
// Tests: the next n pull() calls in this process fail, as a refused read would.
void fail_next_pulls_for_testing(int n);
// Tests: while on, a member's timings of its alltoalls are skewed so that even members
// find single copy 100x slower and odd members the segment: their own picks disagree.
void skew_timings_for_testing(bool on);
bool timings_skewed_for_testing();

// What a member publishes at set-up, in its slot (untrusted by the others).
struct Offer {
  std::uint64_t magic;
  std::uint64_t pid;
  std::uint64_t word_at;  // the address of `word` in the member's memory
  std::uint64_t word;     // a fresh random value
  std::uint64_t min_bytes, gather_min_bytes, max_bytes;
  std::uint64_t willing;  // 0: SAKER_COMM_CMA=0 on this member
  std::uint64_t timed;    // 1: no SAKER_COMM_CMA_MIN_BYTES here, the group times both paths
};

// Single copy or the segment, per power-of-two size class of an alltoall's largest block,
// like TimedChoice (tuning.hpp) but tried in runs: a path's first call after the other
// path's is slow (the other one's copies evicted its buffers from cache) and is not
// counted. Measured here with 2 MiB blocks, alternating each call gave single copy 0.14-0.24
// ns/byte, a run of it 0.09, so TimedChoice's alternation always picked the segment. Calls
// 0-15: four of each path in turn; from then the agreed pick, and every 64th call a run of
// four of the other. Its figures are medians of each path's last four counted calls; the
// members pool them when agreement_due() (every 16th call), so picks depend only on call
// counts and pooled figures: the same on every member that makes the same calls.
class PathChoice {
 public:
  bool single(std::size_t bytes) const;
  void record(std::size_t bytes, bool single, double seconds);
  bool agreement_due(std::size_t bytes) const;
  std::array<double, 2> figures(std::size_t bytes) const;  // segment, single: s/byte (0: none)
  void agree(std::size_t bytes, bool single);

 private:
  struct Class {
    std::array<RecentTimes, 2> recent{};  // segment, single
    std::uint64_t calls = 0;
    int last = -1;    // the path of the previous call
    int agreed = -1;  // -1: none yet
  };
  std::array<Class, 65> by_size_{};
};

// A group's decision, the same on every member.
struct State {
  bool on = false;
  // Whether, within the range, each alltoall size class goes by whichever path the group
  // timed faster (ShmGroup::cma_time; every member applies the same pooled figures), or
  // always by single copy (SAKER_COMM_CMA_MIN_BYTES on some member).
  bool timed = false;
  std::size_t min_bytes = 0, gather_min_bytes = 0, max_bytes = 0;  // max: exclusive
  std::vector<pid_t> pids;  // each member's, as it published it (checked by the probe)
  std::uint64_t word = 0;   // this member's probe word: peers read it
  // Whether an alltoall whose largest block is `bytes` goes by single copy.
  bool use(std::size_t bytes) const { return on && bytes > 0 && bytes >= min_bytes && bytes < max_bytes; }
  // Whether an allgather of `bytes` per member does.
  bool use_gather(std::size_t bytes) const { return on && bytes > 0 && bytes >= gather_min_bytes && bytes < max_bytes; }
};

// The smallest alltoall block, and allgather part, that go by single copy, and the size
// from which they no longer do: SAKER_COMM_CMA_MIN_BYTES where set, else 1 MiB for an
// alltoall's largest block (timed against the segment: State::timed) and kNever for
// allgather (cma.cpp says why), and 8 MiB. Every member's figures are published; the
// group takes the largest minimum and the smallest bound.
constexpr std::size_t kNever = SIZE_MAX;
std::size_t default_min_bytes();
std::size_t default_gather_min_bytes();
std::size_t default_max_bytes();
// This member's offer (fills state.word and the record).
Offer offer(State& state);
// Whether peer's offer is usable: the magic, and its word read back from its memory.
bool check(const Offer& peer) noexcept;

}  // namespace saker::comm::cma
