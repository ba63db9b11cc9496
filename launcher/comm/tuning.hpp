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
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace saker::comm {

// A count from the environment: false when `name` is unset or empty, else *out, or
// saker::Error naming the variable when it is not a whole number >= 0.
bool env_size(const char* name, std::size_t* out);

// The power-of-two class of a size (its bit width): the timed choices below (and
// cma::PathChoice) keep their figures per class.
inline std::size_t size_class(std::size_t bytes) { return static_cast<std::size_t>(std::bit_width(bytes)); }

// A way's last four timed calls, in seconds per byte; typical() is their median, 0 while
// none is measured. The median, not the best: TimedChoice says why.
struct RecentTimes {
  std::array<double, 4> seconds_per_byte{};  // 0: not measured yet
  unsigned next = 0;
  void add(double s_per_byte) { seconds_per_byte[next++ % seconds_per_byte.size()] = s_per_byte; }
  double typical() const;
};

// Which of two ways of doing the same thing is faster here, per power-of-two size
// class, from the timings of this rank's own calls. After a cold first call and four
// calls with each, the faster one by the median of its last four timed calls: one slow
// outlier from a busy machine does not count, a lasting change (placement, load) does
// within four calls; the other one is tried every 32nd call. The median, not the best:
// a send thread's calls spread widely (0.27-1.2 ms at 4 MiB here, the single loop's
// 0.25-0.38 ms), and the best of four picked it while it lost 2x on the whole. Only
// for choices that never change a result.
//
// Where one rank's way changes its peers' timings (a ring's send thread: both ends of a
// socket share the cores), ranks that judge alone can split, each measuring a mix of
// its own choice and the others', and stay split on stale figures (seen: one rank of
// two threaded, the other not, 35% slower at 4 MiB than either agreed way). Then the
// caller pools the ranks' figures whenever agreement_due() says so and passes the
// verdict to agree(): the schedule counts calls only, so it is the same on every rank
// that makes the same sequence of calls, and so is every pick after it.
class TimedChoice {
 public:
  bool second(std::size_t bytes) const;
  void record(std::size_t bytes, bool second, double seconds);
  // Whether the next call of this size is a point where the ranks pool their figures
  // (after the four calls with each way, then every 8th call).
  bool agreement_due(std::size_t bytes) const;
  // This rank's typical (median recent) seconds per byte with each way (0: not
  // measured yet).
  std::array<double, 2> figures(std::size_t bytes) const;
  // The pooled verdict: until the next agreement, second() follows it, not this
  // rank's own figures (the every-32nd look at the other way stays).
  void agree(std::size_t bytes, bool second);

 private:
  struct Stats {
    RecentTimes mode[2];  // first, second
    std::uint64_t calls = 0;
    int agreed = -1;  // -1: judge alone; else the pooled pick
  };
  std::array<Stats, 65> by_size_{};
};

struct LinkPlan {
  // Large sends on a thread of their own: 1 or 0 forced, -1 measured per size class
  // (TimedChoice, agreed among the ring's ranks): on the 2-vCPU machine profiled it
  // won 2-4x at 4 MiB, bound or not, though the ranks had no spare core for it; on
  // another day the same machine gave the single loop 1.7x at 4 MiB.
  int send_thread = -1;
  std::size_t busy_poll_bytes = 0;  // exchanges up to this size spin (yielding) before sleeping
  // Allreduces up to exchange_bytes take the one-step exchange (every rank gets every
  // buffer and reduces all of it), then up to direct_bytes the two-step direct
  // algorithm, larger ones the ring (2(n-1) steps); see ring.hpp. kCalibrate: measured
  // collectively on first use.
  std::size_t direct_bytes = kCalibrate;
  // Ring allreduces larger than this run block by block (0: never; see
  // Ring::allreduce_ring): a quarter of the last-level cache's share of each rank that
  // shares it, so that a block's reduced half is still in cache when it is sent on.
  // Members must use the same: the ring agrees on the smallest on first use.
  std::size_t block_bytes = kDefaultBlock;
  static constexpr std::size_t kDefaultBlock = 4u << 20;  // cache size unknown
  std::size_t exchange_bytes = kCalibrate;
  static constexpr std::size_t kCalibrate = ~std::size_t{0};
};

// CPUs online on this machine.
int cores_online();
// How many stripes this node's large allreduces are cut into: the machine's online
// CPUs shared among the job's ranks on it, at most 4 (past that a stripe of a 25 MiB
// DDP bucket falls to a few MiB, where wake-ups and barriers start to count), or
// SAKER_COMM_SHM_STRIPES (1-16). It sets the segment's layout, so it must be the same
// on every rank of a node.
int stripes_for_node(int online_cpus, int ranks_here);
// How many threads this rank gives them: the CPUs it may run on, at most `stripes`.
int stripe_threads(int stripes);
// The largest cache the kernel reports for CPU 0 (sysfs; glibc's sysconf reports the
// host's whole L3 inside a VM) and how many CPUs share it; zeros when unknown.
struct Cache {
  std::size_t bytes = 0;
  int cpus = 0;
};
Cache last_level_cache(const std::string& sysfs = "/sys/devices/system/cpu/cpu0/cache");
// Identifies the running kernel (boot id): ranks with the same one share CPUs, even in
// different network namespaces or under different node names.
std::string machine_id();
// The plan for a rank on a machine with `online` CPUs running `ranks_here` ranks of
// this job, with `cache` its last-level cache. SAKER_COMM_SEND_THREAD (0/1),
// SAKER_COMM_BUSY_POLL_BYTES, SAKER_COMM_DIRECT_BYTES, SAKER_COMM_EXCHANGE_BYTES and
// SAKER_COMM_BLOCK_BYTES override the measured choices.
LinkPlan plan_links(int online, int ranks_here, Cache cache = {});

}  // namespace saker::comm
