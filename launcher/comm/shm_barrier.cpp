// ShmGroup's barrier (shm.hpp): how a member announces its arrival and waits for its
// peers (spin, hold, yield, sleep), and what it learns about the CPUs they run on.
#include <immintrin.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "common/shm_names.hpp"
#include "launcher/comm/shm.hpp"
#include "launcher/comm/shm_layout.hpp"

namespace saker::comm {
using namespace shm_layout;
namespace {

// Pause-spins (25 to 140 ns each, by CPU) a barrier makes at least before it yields,
// unless its peer is queued on its CPU. Short on purpose: on a shared 2-core node the peer
// is often not running, and a long spin keeps it off the core (4096 spins made a 4 KiB
// allreduce ~120 us under load, 32 about 4 us); when nothing else is runnable,
// sched_yield() returns at once and works as a ~1 us poll.
constexpr std::uint64_t kSpins = 32;
// After its spin budget a waiter yields for this long, then sleeps on the late peer's futex
// word (seq), woken by that peer's arrival. Why: on a node with more runnable threads than
// CPUs (2 ranks and their compute on 2 vCPUs) a sched_yield loop takes CPU from the peer's
// own compute; measured in bench_torch ddp-breakdown under load, the comm threads' CPU per
// DDP step fell from 21.9 ms (10.4-39.3) to 15.8 ms (12.5-20.0) with a 1 ms yield phase.
constexpr std::int64_t kYieldNs = 1'000'000;
// Before those yields, a waiter that may have a CPU of its own, whose peer is not on its
// CPU, keeps polling this long past its spin budget (wait_step). Yielding there cannot help
// the peer, which runs elsewhere; it hands the CPU to whatever else is runnable on it, which
// may keep it for a time slice while the peer arrives microseconds later. Two pinned ranks
// beside a busy process on each CPU fell to 0.00-0.01 GB/s on 1-64 KiB alltoall, allgather
// and reduce-scatter (OpenMPI, which polls, 0.5-5.8); holding 10, 30, 100 or 1000 us gave
// 0.5-12 GB/s alike. Short, because a rank's own compute threads may want the CPU too: a
// 1 ms hold cost the DDP step 1-5% (bench_torch --baseline, no busy processes); 50 us
// cost nothing measurable (0.993 of the step without it, noise 1.018; the comm thread's
// CPU +1-2 ms of ~13 per step, its buckets done sooner).
constexpr std::int64_t kHoldNs = 50'000;
long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* limit) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, limit, nullptr, 0);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The CPUs this thread may run on (its affinity mask), or all online ones.
cpu_set_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return set;
  for (int c = 0; c < std::min(cores_online(), CPU_SETSIZE); ++c) CPU_SET(c, &set);
  return set;
}

// A barrier that found a lower member last seen on its own CPU this many times in a row
// steps off that CPU (step_off_cpu), at most once per kStepGapNs per lane. Short: each
// sleep and wake-up between calls (a TCP barrier, a futex wait) may put the two on one CPU
// again, and bench_collectives times blocks of 50 calls after such a barrier (64 and
// 10 ms: 1 KiB reduce_scatter unpinned 0.48 GB/s (0.23-0.65); 16 and 1 ms: 0.66 (0.57-0.69)).
// A step costs two sched_setaffinity calls and a migration, a few us at most per ms.
constexpr int kSharedWaits = 16;
constexpr std::int64_t kStepGapNs = 1'000'000;

}  // namespace

// Every member's affinity mask, in member order: one allgather through the segment
// (every member calls it, whatever its own mask).
std::vector<cpu_set_t> ShmGroup::members_masks() {
  const cpu_set_t mine = usable_cpus();
  std::vector<cpu_set_t> all(members_.size());
  allgather(&mine, all.data(), sizeof mine);
  return all;
}

namespace {
thread_local BarrierWaits t_waits;  // barrier_waits_this_thread()

void count_wait(std::int64_t late_ns, std::int64_t spin_ns, bool yielded) {
  if (late_ns <= 0 || late_ns >= spin_ns + kHoldNs) return;
  ++t_waits.short_waits;
  if (yielded) ++t_waits.short_waits_yielded;
}
}  // namespace

BarrierWaits barrier_waits_this_thread() noexcept { return t_waits; }

WaitStep wait_step(std::int64_t past_spin_ns, bool hold) {
  if (hold && past_spin_ns < kHoldNs) return WaitStep::pause;
  return past_spin_ns < kYieldNs ? WaitStep::yield : WaitStep::sleep;
}

bool step_off_cpu(int cpu) {
  cpu_set_t mask;
  if (cpu < 0 || sched_getaffinity(0, sizeof mask, &mask) != 0 || !CPU_ISSET(cpu, &mask) || CPU_COUNT(&mask) < 2)
    return false;
  cpu_set_t others = mask;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return false;  // moves it now, if it runs on cpu
  // The mask as it was: the thread stays where it went until the scheduler moves it. The
  // collective already completed on every member, so a failure here is logged, not thrown.
  if (sched_setaffinity(0, sizeof mask, &mask) != 0)
    log::error("comm: cannot give this thread its CPU mask back after moving it off CPU " + std::to_string(cpu) + ": " +
               std::strerror(errno) + " (it now runs without that CPU; pin the ranks, taskset or --cpu-bind, to avoid the move)");
  return true;
}

bool own_cpu_each(const std::vector<cpu_set_t>& masks, int online) {
  cpu_set_t any;
  CPU_ZERO(&any);
  for (cpu_set_t s : masks) CPU_OR(&any, &any, &s);
  return static_cast<int>(masks.size()) <= std::min(CPU_COUNT(&any), online);
}

// Every member announces its arrival, then waits for the others: it busy-waits (pause)
// for its lane's spin budget, then yields the CPU between polls, watching the deadline,
// abort notices and whether the peer's process still exists. A peer last seen on this
// member's own CPU is most likely queued behind it there: then it yields at once (the
// scheduler often puts both ranks of a loaded 2-CPU machine on one CPU, where spinning
// only delays the peer: 32 pauses before each yield made a 1 KiB allgather 2.5 us there,
// yielding at once 1.7 us; a spin of 50 us, 25 us).
void ShmGroup::barrier(int lane_index, const char* during) {
  auto* flags = reinterpret_cast<Flag*>(base_ + static_cast<std::size_t>(lane_index) * header_bytes());
  Lane& lane = lanes_[static_cast<std::size_t>(lane_index)];
  const std::uint64_t phase = ++lane.phase;
  const std::int64_t arrived = now_ns();
  const int cpu = sched_getcpu();
  flags[index_].cpu.store(cpu, std::memory_order_relaxed);
  flags[index_].arrived_ns[phase % 2].store(arrived, std::memory_order_relaxed);
  flags[index_].phase.store(phase, std::memory_order_release);  // publishes arrived_ns too
  flags[index_].seq.fetch_add(1, std::memory_order_seq_cst);
  if (flags[index_].sleepers.load(std::memory_order_seq_cst) > 0)
    futex(&flags[index_].seq, FUTEX_WAKE, INT32_MAX, nullptr);
  const std::int64_t spin_until = arrived + lane.spin.ns();
  bool spinning = true;
  std::int64_t last = arrived;  // the latest arrival among the members
  // From the arrival time (the same clock): no second clock read when the peers are there.
  const net::Deadline deadline = net::Clock::time_point(std::chrono::nanoseconds(arrived)) + mesh_.timeout();
  bool shared = false;  // a lower member was last seen on this CPU
  bool yielded = false;
  for (int j = 0; j < size(); ++j) {
    std::uint64_t polls = 0;
    const bool peer_here = j != index_ && cpu >= 0 && flags[j].cpu.load(std::memory_order_relaxed) == cpu;
    if (peer_here) {
      spinning = false;
      shared = shared || j < index_;
    }
    while (flags[j].phase.load(std::memory_order_acquire) < phase) {
      ++polls;
      if (spinning) {
        _mm_pause();
        // The clock is read every 16 pauses only, past the first kSpins.
        if (polls < kSpins || polls % 16 != 0 || now_ns() < spin_until) continue;
        spinning = false;
      }
      const WaitStep step = wait_step(now_ns() - spin_until, own_cpus_ && !peer_here);
      if (step == WaitStep::pause) {
        _mm_pause();
      } else if (step == WaitStep::yield) {
        yielded = true;
        sched_yield();  // let the peer run
      } else {
        flags[j].sleepers.fetch_add(1, std::memory_order_seq_cst);
        std::uint32_t seen = flags[j].seq.load(std::memory_order_seq_cst);
        if (flags[j].phase.load(std::memory_order_acquire) < phase) {
          const timespec limit{0, 2'000'000};  // 2 ms: the checks below still run
          futex(&flags[j].seq, FUTEX_WAIT, seen, &limit);
        }
        flags[j].sleepers.fetch_sub(1, std::memory_order_seq_cst);
        polls = (polls | 255) + 1;  // a sleep is long: check the peer after each
      }
      if (polls % 256 != 0) continue;
      mesh_.check_abort(during);
      int peer = members_[static_cast<std::size_t>(j)];
      int pid = mesh_.peer(peer).pid;
      if (pid > 0 && pid != getpid() && shm_names::process_gone(pid))
        mesh_.fail(during, peer, mesh_.who(peer) + " exited (process " + std::to_string(pid) + " is gone)");
      if (net::Clock::now() >= deadline)
        mesh_.fail(during, peer, mesh_.who(peer) + " did not answer within " + std::to_string(mesh_.timeout().count()) +
                               " ms (hung or stopped; raise SAKER_COMM_TIMEOUT if it is only slow)");
    }
    last = std::max(last, flags[j].arrived_ns[phase % 2].load(std::memory_order_relaxed));
  }
  count_wait(last - arrived, spin_until - arrived, yielded);
  lane.spin.learn(last - arrived, spinning);
  // Members that may each have a CPU but keep meeting on one hand it over at every call
  // (~1.8 us a 1 KiB call, 2 ranks on a loaded 2-CPU machine, where the scheduler kept both
  // on one CPU for seconds): the higher one steps off it (0.23 us a call then).
  lane.shared_waits = shared ? lane.shared_waits + 1 : 0;
  if (own_cpus_ && lane.shared_waits >= kSharedWaits && last - lane.stepped_ns >= kStepGapNs) {
    lane.stepped_ns = last;
    lane.shared_waits = 0;
    step_off_cpu(cpu);
  }
}

}  // namespace saker::comm
