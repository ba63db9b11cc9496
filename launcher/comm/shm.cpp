#include "launcher/comm/shm.hpp"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_names.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {
namespace {

constexpr std::size_t kLine = 64;
constexpr std::size_t kMaxLocal = 256;
// Pause-spins (25 to 140 ns each, by CPU) a barrier makes at least before it yields,
// unless its peer is queued on its CPU. Short on purpose: on a shared 2-core node the peer
// is often not running, and a long spin keeps it off the core (4096 spins made a 4 KiB
// allreduce ~120 us under load, 32 about 4 us); when nothing else is runnable,
// sched_yield() returns at once and works as a ~1 us poll.
constexpr std::uint64_t kSpins = 32;
// The most a barrier busy-waits before it yields, when every member may have a CPU of its
// own. A yield on a busy machine can hand the core to another process for a time slice
// (ms) where the peer was a few microseconds away. Each lane learns how long to spin from
// how late its peers actually arrived (SpinBudget, shm.hpp).
constexpr std::int64_t kSpinCapNs = 50'000;
// Up to this size an allreduce takes one barrier and every rank reduces everything.
constexpr std::size_t kDirectBytes = 64 * 1024;
// The least a stripe carries: below ~1 MiB its copies take less than the two futex
// wake-ups that hand it to a thread and back.
constexpr std::size_t kStripeBytes = 1 << 20;

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

std::size_t header_bytes() { return kMaxLocal * sizeof(Flag); }

// A barrier that found a lower member last seen on its own CPU this many times in a row
// steps off that CPU (step_off_cpu), at most once per kStepGapNs per lane. Short: each
// sleep and wake-up between calls (a TCP barrier, a futex wait) may put the two on one CPU
// again, and bench_collectives times blocks of 50 calls after such a barrier (64 and
// 10 ms: 1 KiB reduce_scatter unpinned 0.48 GB/s (0.23-0.65); 16 and 1 ms: 0.66 (0.57-0.69)).
// A step costs two sched_setaffinity calls and a migration, a few us at most per ms.
constexpr int kSharedWaits = 16;
constexpr std::int64_t kStepGapNs = 1'000'000;

// Copies into a slot. Slot lines were read by the other ranks on their previous use,
// so ordinary stores must first take each line back from their caches: cheap between
// SMT siblings that share a cache, but ~0.35 us a line between cores in different
// CCDs. Non-temporal stores skip that, at the price of a trip through memory. Measured
// here for 64 MiB: ordinary 6.6 ms / streaming 11.7 ms on siblings, ordinary 48 ms /
// streaming 7.6 ms across CCDs, and a VM's vCPUs move between the two. So StoreChoice
// picks per size by timing both. Results are the same either way.
void publish(char* slot, const char* src, std::size_t bytes, bool streaming) {
  if (!streaming) {
    std::memcpy(slot, src, bytes);
    return;
  }
  std::size_t i = 0;
  while (i < bytes && reinterpret_cast<std::uintptr_t>(slot + i) % 16 != 0) {
    slot[i] = src[i];
    ++i;
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(slot + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  if (i < bytes) std::memcpy(slot + i, src + i, bytes - i);
  _mm_sfence();  // the barrier's flag must not become visible before the data
}

// One of `parts` shares of `count` elements, rounded up to whole cache lines of `align`
// elements: shares then start on cache lines, so no two ranks or stripes write one line.
std::size_t share_in_lines(std::size_t count, std::size_t parts, std::size_t align) {
  return ((count + parts - 1) / parts + align - 1) / align * align;
}

std::string octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// What fstat says about a segment that is not the private one we expect, or "".
std::string mismatch(const struct stat& st, std::size_t bytes) {
  const unsigned mode = static_cast<unsigned>(st.st_mode) & 07777;
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_uid != geteuid() || mode != 0600)
    return "it is owned by uid " + std::to_string(st.st_uid) + " with mode " + octal(mode) + ", not by this user (uid " +
           std::to_string(geteuid()) + ") with mode 0600: another user may have planted it";
  if (static_cast<std::size_t>(st.st_size) != bytes)
    return "it holds " + std::to_string(st.st_size) + " bytes, not " + std::to_string(bytes) +
           " (do the ranks set different SAKER_COMM_SHM_STRIPES?)";
  return "";
}

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw Error(explain("refusing the shared-memory segment /dev/shm" + name, why,
                      "remove it (rm /dev/shm" + name + ") and report it to the administrator if you did not make it; "
                      "SAKER_COMM_TRANSPORT=ring runs without shared memory"));
}

}  // namespace

namespace segment {

int create(const std::string& name, std::size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST || err == ELOOP) refuse(name, "a file of that name exists already, and a new segment never adopts one");
    throw Error(explain("cannot create the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "check free space in /dev/shm, or set SAKER_COMM_TRANSPORT=ring"));
  }
  // The umask may have narrowed the mode; the members check for exactly 0600.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw Error(explain("cannot size the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "check free space in /dev/shm, or set SAKER_COMM_TRANSPORT=ring"));
  }
  return fd;
}

int open_checked(const std::string& name, std::size_t bytes, bool missing_ok) {
  int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT && missing_ok) return -1;
    if (err == ELOOP) refuse(name, "it is a symbolic link");
    throw Error(explain("cannot open the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "the rank that made it may have failed: look at its output; or set SAKER_COMM_TRANSPORT=ring"));
  }
  struct stat st {};
  std::string why = fstat(fd, &st) != 0 ? std::string("fstat failed: ") + std::strerror(errno) : mismatch(st, bytes);
  // Our own, still empty: the creator has not sized it yet (create() sets the mode first).
  if (!why.empty() && missing_ok && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size == 0) {
    close(fd);
    return -1;
  }
  if (!why.empty()) {
    close(fd);
    refuse(name, why);
  }
  return fd;
}

void remove_if_ours(const std::string& name) noexcept {
  int fd = shm_open(name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return;
  struct stat st {};
  const bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
  close(fd);
  if (ours) shm_unlink(name.c_str());
}

void abandon(int fd, char*& base, std::size_t bytes, const std::string& name) noexcept {
  if (fd >= 0) close(fd);
  if (base) munmap(base, bytes);
  base = nullptr;
  if (!name.empty()) remove_if_ours(name);
}

}  // namespace segment

ShmGroup::ShmGroup(Mesh& mesh, std::vector<int> members, int channel, std::size_t slot_bytes, int stripes,
                   int threads)
    : mesh_(mesh),
      members_(std::move(members)),
      // The slot memory is shared among the lanes, so the segment keeps its size.
      slot_bytes_(std::max<std::size_t>(kDirectBytes, slot_bytes / static_cast<std::size_t>(std::max(1, stripes))) /
                  kLine * kLine),
      lanes_(static_cast<std::size_t>(std::max(1, stripes))) {
  auto it = std::find(members_.begin(), members_.end(), mesh.rank());
  SAKER_ASSERT(it != members_.end(), "shm group built on a rank outside it");
  if (members_.size() > kMaxLocal)
    throw Error(explain("too many ranks on one node for the shared-memory path (" + std::to_string(members_.size()) + ")",
                        "the segment has room for 256", "set SAKER_COMM_TRANSPORT=ring"));
  index_ = static_cast<int>(it - members_.begin());
  // Members that disagree on the stripes (SAKER_COMM_SHM_STRIPES set on some only) expect
  // other sizes: open_checked() refuses the segment instead of one rank overrunning it.
  map_bytes_ = lanes_.size() * (header_bytes() + 2 * members_.size() * slot_bytes_);
  map_segment(channel);
  // Members busy-wait only when each may have a CPU of its own (SpinBudget, own_cpu_each).
  // Each member's own mask alone gave pinned ranks (one CPU apiece) no spin at all.
  own_cpus_ = own_cpu_each(members_masks(), cores_online());
  for (Lane& lane : lanes_) lane.spin = SpinBudget(own_cpus_ ? kSpinCapNs : 0);
  cma_setup();  // whether alltoall and allgather may copy once between members (cma.hpp)
  threads_ = std::make_unique<Lanes>(std::clamp(threads, 1, static_cast<int>(lanes_.size())));
}

ShmGroup::~ShmGroup() {
  threads_.reset();  // no lane runs past here
  if (base_) munmap(base_, map_bytes_);
}

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

void ShmGroup::map_segment(int channel) {
  int fd = -1;
  try {
    fd = share_name(channel);
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    fd = -1;
    if (p == MAP_FAILED)
      throw Error(explain("cannot map /dev/shm" + name_, std::strerror(err), "set SAKER_COMM_TRANSPORT=ring"));
    base_ = static_cast<char*>(p);
    barrier(0, "mapping the shared-memory segment");  // every member has it mapped now
  } catch (...) {
    segment::abandon(fd, base_, map_bytes_, name_);  // a failed start leaves no name behind either
    throw;
  }
  // The mappings stay; the name goes, so that nothing is left in /dev/shm whatever happens.
  // Every member removes it: the creator may be killed right after the barrier.
  shm_unlink(name_.c_str());
}

// The name travels as a fixed-size, NUL-padded record over the (authenticated) mesh links,
// before the segment exists: then every member can remove it should the creator die at
// any moment after creating it. The links are opened (and authenticated) first, so that
// nothing slow runs while only the creator knows the name.
int ShmGroup::share_name(int channel) {
  constexpr std::size_t kRecord = 64;
  const int link_channel = kNameChannel + channel;
  auto deadline = net::deadline_in(mesh_.timeout());
  if (index_ == 0) {
    std::vector<int> links;
    for (std::size_t j = 1; j < members_.size(); ++j) links.push_back(mesh_.link(members_[j], link_channel));
    if (int swept = shm_names::sweep_stale(); swept > 0)
      log::info("comm: removed " + std::to_string(swept) + " shared-memory segment(s) that killed ranks left in /dev/shm");
    name_ = shm_names::fresh();
    char record[kRecord] = {};
    std::memcpy(record, name_.data(), std::min(name_.size(), kRecord - 1));
    for (std::size_t j = 1; j < members_.size(); ++j)
      net::send_all(links[j - 1], record, kRecord, deadline, mesh_.who(members_[j]));
    return segment::create(name_, map_bytes_);
  }
  const int creator = members_[0];
  char record[kRecord] = {};
  net::recv_all(mesh_.link(creator, link_channel), record, kRecord, deadline, mesh_.who(creator));
  std::string name(record, strnlen(record, kRecord));
  if (!shm_names::well_formed(name))
    throw Error(explain("refusing the shared-memory segment name that " + mesh_.who(creator) + " sent",
                        "it is not of the form /saker-PID-HEX", "use the same Saker version on every rank"));
  name_ = name;
  // The creator makes it right after sending the name: wait for it, watching the creator.
  for (int tries = 1;; ++tries) {
    if (int fd = segment::open_checked(name_, map_bytes_, /*missing_ok=*/true); fd >= 0) return fd;
    if (tries % 64 == 0) {
      mesh_.check_abort("mapping the shared-memory segment");
      int pid = mesh_.peer(creator).pid;
      if (pid > 0 && pid != getpid() && shm_names::process_gone(pid))
        mesh_.fail("mapping the shared-memory segment", creator, mesh_.who(creator) + " exited (process " +
                                                                     std::to_string(pid) + " is gone)");
      if (net::Clock::now() >= deadline)
        mesh_.fail("mapping the shared-memory segment", creator,
                   mesh_.who(creator) + " did not create /dev/shm" + name_ + " within " +
                       std::to_string(mesh_.timeout().count()) + " ms");
    }
    sched_yield();
  }
}

// The segment: all lanes' flags first, then each lane's two slot sets.
char* ShmGroup::slot(int lane, int set, int who) const {
  std::size_t n = members_.size();
  std::size_t index = (static_cast<std::size_t>(lane) * 2 + static_cast<std::size_t>(set)) * n + static_cast<std::size_t>(who);
  return base_ + lanes_.size() * header_bytes() + index * slot_bytes_;
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

void ShmGroup::allreduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  int n = size();
  if (n == 1 || count == 0) return;
  std::size_t es = size_of(type);
  char* out = static_cast<char*>(data);
  if (count * es <= std::min(kDirectBytes, slot_bytes_)) {
    // Small: one barrier. Everyone publishes its buffer and reduces all of it
    // (the same rank order as below, so results do not depend on the path).
    Lane& lane = lanes_[0];
    std::vector<const void*>& ins = small_ins_;  // kept: a small allreduce allocates nothing once warm
    ins.resize(static_cast<std::size_t>(n));
    std::memcpy(slot(0, lane.set, index_), out, count * es);
    barrier(0, "allreduce");
    for (int j = 0; j < n; ++j) ins[static_cast<std::size_t>(j)] = slot(0, lane.set, j);
    reduce::combine(out, ins.data(), n, count, type, op);
    lane.set ^= 1;  // the other set next: this one is rewritten only after the next barrier
    return;
  }
  const bool streaming = stores_.streaming(count * es);
  const auto started = std::chrono::steady_clock::now();
  // Stripes of whole cache lines, at least kStripeBytes each: the count alone decides,
  // so every rank cuts the same ones.
  std::size_t align = std::max<std::size_t>(1, kLine / es);
  std::size_t used = std::clamp<std::size_t>(count * es / kStripeBytes, 1, lanes_.size());
  std::size_t stripe = share_in_lines(count, used, align);
  // No more threads than stripes: a 2 MiB allreduce wakes one helper, not three.
  const std::size_t threads = std::min<std::size_t>(used, static_cast<std::size_t>(threads_->count()));
  threads_->run([&](int t) {
    // Lowest stripe first on every rank and thread (see shm.hpp): no rank waits for ever.
    for (std::size_t s = static_cast<std::size_t>(t); s < used; s += threads) {
      std::size_t b = std::min(count, s * stripe), e = std::min(count, b + stripe);
      allreduce_stripe(static_cast<int>(s), out + b * es, e - b, type, op, streaming);
    }
  }, static_cast<int>(threads));
  stores_.record(count * es, streaming, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

void ShmGroup::allreduce_stripe(int lane_index, char* data, std::size_t count, DataType type, ReduceOp op,
                                bool streaming) {
  int n = size();
  std::size_t es = size_of(type);
  Lane& lane = lanes_[static_cast<std::size_t>(lane_index)];
  std::vector<const void*> ins(static_cast<std::size_t>(n));
  std::size_t piece_elems = slot_bytes_ / es;
  // Parts start on cache lines so that ranks never write the same line.
  std::size_t align = std::max<std::size_t>(1, kLine / es);
  for (std::size_t done = 0; done < count; done += piece_elems) {
    std::size_t m = std::min(piece_elems, count - done);
    char* piece = data + done * es;
    std::size_t part = share_in_lines(m, static_cast<std::size_t>(n), align);
    auto part_range = [&](int i) {
      std::size_t b = std::min(m, part * static_cast<std::size_t>(i));
      return std::make_pair(b, std::min(m, b + part));
    };
    char* mine = slot(lane_index, lane.set, index_);
    // 1. Publish only what the others reduce: their parts of my buffer.
    for (int j = 0; j < n; ++j) {
      auto [bj, ej] = part_range(j);
      if (j != index_ && ej > bj) publish(mine + bj * es, piece + bj * es, (ej - bj) * es, streaming);
    }
    barrier(lane_index, "allreduce");
    // 2. Reduce my part in rank order, my own term straight from my buffer, into my
    //    buffer (with ordinary stores, also into my slot in the same pass); publish it.
    auto [b, e] = part_range(index_);
    if (e > b) {
      for (int j = 0; j < n; ++j)
        ins[static_cast<std::size_t>(j)] = j == index_ ? piece + b * es : slot(lane_index, lane.set, j) + b * es;
      reduce::combine(piece + b * es, ins.data(), n, e - b, type, op, streaming ? nullptr : mine + b * es);
      if (streaming) publish(mine + b * es, piece + b * es, (e - b) * es, true);
    }
    barrier(lane_index, "allreduce");
    // 3. Everyone else's reduced parts.
    for (int j = 0; j < n; ++j) {
      auto [bj, ej] = part_range(j);
      if (j != index_ && ej > bj) std::memcpy(piece + bj * es, slot(lane_index, lane.set, j) + bj * es, (ej - bj) * es);
    }
    lane.set ^= 1;  // the next piece uses the other slots: no third barrier needed
  }
}

void ShmGroup::broadcast(void* data, std::size_t bytes, int root_index) {
  if (size() == 1 || bytes == 0) return;
  char* p = static_cast<char*>(data);
  for (std::size_t done = 0; done < bytes; done += slot_bytes_) {
    std::size_t m = std::min(slot_bytes_, bytes - done);
    Lane& lane = lanes_[0];
    if (index_ == root_index) publish(slot(0, lane.set, root_index), p + done, m, false);
    barrier(0, "broadcast");
    if (index_ != root_index) std::memcpy(p + done, slot(0, lane.set, root_index), m);
    lane.set ^= 1;  // a slot set is rewritten two pieces later, after the next barrier
  }
}

void ShmGroup::allgather(const void* send, void* recv, std::size_t bytes) {
  char* out = static_cast<char*>(recv);
  char* own = out + static_cast<std::size_t>(index_) * bytes;
  if (own != send && bytes > 0) std::memmove(own, send, bytes);
  if (size() == 1 || bytes == 0) return;
  // Single copy (cma.cpp) when asked for; if a read failed, every member redoes it here.
  if (cma_.use_gather(bytes) && allgather_cma(static_cast<const char*>(send), out, bytes)) return;
  for (std::size_t done = 0; done < bytes; done += slot_bytes_) {
    std::size_t m = std::min(slot_bytes_, bytes - done);
    Lane& lane = lanes_[0];
    std::memcpy(slot(0, lane.set, index_), own + done, m);
    barrier(0, "allgather");
    for (int j = 0; j < size(); ++j)
      if (j != index_) std::memcpy(out + static_cast<std::size_t>(j) * bytes + done, slot(0, lane.set, j), m);
    lane.set ^= 1;  // as in broadcast: rewritten only after the next barrier
  }
}


}  // namespace saker::comm
