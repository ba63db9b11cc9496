#include "launcher/comm/shm_ordered.hpp"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_names.hpp"
#include "launcher/comm/net.hpp"
#include "launcher/comm/reduce.hpp"
#include "launcher/comm/ring.hpp"
#include "launcher/comm/shm.hpp"
#include "saker/comm.hpp"

namespace saker::comm {
namespace {

constexpr std::size_t kLine = 64;
constexpr std::size_t kLineFloats = kLine / sizeof(float);
// Up to this size a sum takes one barrier and every rank folds everything (as shm.cpp).
constexpr std::size_t kDirectBytes = 64 * 1024;
// A worker's slot: 1 MiB (a step then moves about 1 MiB of every contribution, which
// amortises its two barriers), less when L is large, so that the segment (two sets of L
// slots) stays within 32 MiB.
constexpr std::size_t kSlotBytes = 1 << 20;
constexpr std::size_t kSegmentBudget = 32u << 20;
// Pause-spins before each sched_yield() while waiting (shm_barrier.cpp says why it is short).
constexpr std::uint64_t kSpins = 32;

struct alignas(kLine) Flag {
  std::atomic<std::uint64_t> phase;
  char pad[kLine - sizeof(std::atomic<std::uint64_t>)];
};

std::size_t chunk_for(int logical) {
  const std::size_t l = static_cast<std::size_t>(logical);
  const std::size_t slot = std::min(kSlotBytes, kSegmentBudget / (2 * l));
  return std::max(kLineFloats, slot / sizeof(float) / l / kLineFloats * kLineFloats);
}

}  // namespace

bool ShmOrdered::usable(const Communicator& comm) {
  return comm.size() > 1 && comm.node_count() == 1 && comm.transport() == Transport::shm;
}

ShmOrdered::ShmOrdered(Communicator& comm, const LogicalMap& map)
    : comm_(comm), map_(map), rank_(comm.rank()), pids_(static_cast<std::size_t>(comm.size())) {
  SAKER_ASSERT(map.world() == comm.size(), "logical map made for another world size");
  chunk_ = chunk_for(map.logical());
  slot_bytes_ = static_cast<std::size_t>(map.logical()) * chunk_ * sizeof(float);
  map_bytes_ = static_cast<std::size_t>(comm.size()) * sizeof(Flag) +
               2 * static_cast<std::size_t>(map.logical()) * slot_bytes_;
  const int me = static_cast<int>(getpid());
  comm.allgather(&me, pids_.data(), sizeof me);
  map_segment();
}

ShmOrdered::~ShmOrdered() {
  if (base_) munmap(base_, map_bytes_);
}

// As ShmGroup::map_segment (shm_segment.cpp): map, wait until every rank has, then unlink; on
// any failure unmap and remove the name, so that nothing is left in /dev/shm.
void ShmOrdered::map_segment() {
  int fd = -1;
  try {
    fd = share_name();
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    close(fd);
    fd = -1;
    if (p == MAP_FAILED)
      throw Error(explain("cannot map /dev/shm" + name_ + " for the canonical-order sum", std::strerror(err),
                          "set SAKER_COMM_TRANSPORT=ring"));
    base_ = static_cast<char*>(p);
    barrier("mapping the canonical-order sum's shared-memory segment");
  } catch (...) {
    segment::abandon(fd, base_, map_bytes_, name_);
    throw;
  }
  shm_unlink(name_.c_str());  // every rank: the creator may be killed right after the barrier
}

// The name goes out (a fixed-size record, over the communicator's authenticated links)
// before the segment exists, so that every rank can remove it should its creator die.
int ShmOrdered::share_name() {
  constexpr std::size_t kRecord = 64;
  char record[kRecord] = {};
  if (rank_ == 0) {
    if (int swept = shm_names::sweep_stale(); swept > 0)
      log::info("comm: removed " + std::to_string(swept) + " shared-memory segment(s) that killed ranks left in /dev/shm");
    name_ = shm_names::fresh();
    std::memcpy(record, name_.data(), std::min(name_.size(), kRecord - 1));
  }
  comm_.broadcast(record, kRecord, 0);
  if (rank_ == 0) return segment::create(name_, map_bytes_);
  std::string name(record, strnlen(record, kRecord));
  if (!shm_names::well_formed(name))
    throw Error(explain("refusing the shared-memory segment name that rank 0 (host " + comm_.host_of(0) + ") sent",
                        "it is not of the form /saker-PID-HEX", "use the same Saker version on every rank"));
  name_ = name;
  const auto deadline = net::deadline_in(comm_.options().timeout);
  for (int tries = 1;; ++tries) {
    if (int fd = segment::open_checked(name_, map_bytes_, /*missing_ok=*/true); fd >= 0) return fd;
    if (tries % 64 == 0) {
      if (pids_[0] != getpid() && shm_names::process_gone(pids_[0]))
        fail("mapping the canonical-order sum's segment", 0, "exited (process " + std::to_string(pids_[0]) + " is gone)");
      if (net::Clock::now() >= deadline)
        fail("mapping the canonical-order sum's segment", 0, "did not create /dev/shm" + name_ + " in time");
    }
    sched_yield();
  }
}

void ShmOrdered::fail(const char* during, int peer, const std::string& why) const {
  throw Error(explain("rank " + std::to_string(rank_) + " stopped while " + during,
                      "rank " + std::to_string(peer) + " (host " + comm_.host_of(peer) + ") " + why,
                      "look at that rank's output first; raise SAKER_COMM_TIMEOUT if it is only slow"));
}

void ShmOrdered::barrier(const char* during) {
  auto* flags = reinterpret_cast<Flag*>(base_);
  const std::uint64_t phase = ++phase_;
  flags[rank_].phase.store(phase, std::memory_order_release);
  const auto deadline = net::deadline_in(comm_.options().timeout);
  for (int j = 0; j < comm_.size(); ++j) {
    std::uint64_t spins = 0;
    while (flags[j].phase.load(std::memory_order_acquire) < phase) {
      if (++spins < kSpins) {
        _mm_pause();
        continue;
      }
      sched_yield();  // oversubscribed nodes: let the peer run
      if (spins % 256 != 0) continue;
      const int pid = pids_[static_cast<std::size_t>(j)];
      if (pid > 0 && pid != getpid() && shm_names::process_gone(pid))
        fail(during, j, "exited (process " + std::to_string(pid) + " is gone)");
      if (net::Clock::now() >= deadline)
        fail(during, j, "did not answer within " + std::to_string(comm_.options().timeout.count()) +
                            " ms (hung or stopped)");
    }
  }
}

// The segment: the ranks' flags, then set 0's L worker slots, then set 1's.
float* ShmOrdered::slot(int set, int worker) const {
  const std::size_t index = static_cast<std::size_t>(set) * static_cast<std::size_t>(map_.logical()) +
                            static_cast<std::size_t>(worker);
  return reinterpret_cast<float*>(base_ + static_cast<std::size_t>(comm_.size()) * sizeof(Flag) + index * slot_bytes_);
}

void ShmOrdered::sum(std::span<float* const> parts, std::size_t count, float* out) {
  SAKER_ASSERT(static_cast<int>(parts.size()) == map_.count(rank_), "contributions do not match the logical map");
  if (count == 0) return;
  if (count * sizeof(float) <= kDirectBytes && count <= static_cast<std::size_t>(map_.logical()) * chunk_) {
    sum_direct(parts, count, out);
    return;
  }
  const std::vector<std::size_t> seg = Ring::even_split(count, map_.logical());
  std::size_t longest = 0;
  for (std::size_t s = 0; s + 1 < seg.size(); ++s) longest = std::max(longest, seg[s + 1] - seg[s]);
  for (std::size_t step = 0; step * chunk_ < longest; ++step) sum_step(parts, seg, step, out);
}

// Small sums: every rank publishes its contributions whole and folds all L of them.
void ShmOrdered::sum_direct(std::span<float* const> parts, std::size_t count, float* out) {
  const int first = map_.first(rank_), logical = map_.logical();
  for (std::size_t j = 0; j < parts.size(); ++j)
    std::memcpy(slot(set_, first + static_cast<int>(j)), parts[j], count * sizeof(float));
  barrier("the canonical-order sum");
  std::vector<const float*> all(static_cast<std::size_t>(logical));
  for (int l = 0; l < logical; ++l)
    all[static_cast<std::size_t>(l)] = l >= first && l < first + static_cast<int>(parts.size())
                                           ? parts[static_cast<std::size_t>(l - first)]
                                           : slot(set_, l);
  canonical_sum(all, count, out);
  set_ ^= 1;  // the other set next: this one is rewritten only after the next barrier
}

// One step: chunk `step` of every canonical segment (see the top of shm_ordered.hpp).
void ShmOrdered::sum_step(std::span<float* const> parts, const std::vector<std::size_t>& seg, std::size_t step,
                          float* out) {
  const int first = map_.first(rank_), mine = map_.count(rank_), logical = map_.logical();
  auto own = [&](int s) { return s >= first && s < first + mine; };
  auto range = [&](int s) {
    const std::size_t b = std::min(seg[static_cast<std::size_t>(s) + 1], seg[static_cast<std::size_t>(s)] + step * chunk_);
    return std::make_pair(b, std::min(seg[static_cast<std::size_t>(s) + 1], b + chunk_));
  };
  // 1. Publish the chunks of the other ranks' segments, for each of my workers.
  for (int j = 0; j < mine; ++j) {
    for (int s = 0; s < logical; ++s) {
      auto [b, e] = range(s);
      if (!own(s) && e > b)
        std::memcpy(slot(set_, first + j) + static_cast<std::size_t>(s) * chunk_, parts[static_cast<std::size_t>(j)] + b,
                    (e - b) * sizeof(float));
    }
  }
  barrier("the canonical-order sum");
  // 2. Fold my segments from worker s on: out and chunk s of worker s's slot, one pass.
  ins_.resize(static_cast<std::size_t>(logical));
  for (int s = first; s < first + mine; ++s) {
    auto [b, e] = range(s);
    if (e == b) continue;
    for (int k = 0; k < logical; ++k) {
      const int l = (s + k) % logical;
      ins_[static_cast<std::size_t>(k)] = own(l) ? static_cast<const void*>(parts[static_cast<std::size_t>(l - first)] + b)
                                                 : slot(set_, l) + static_cast<std::size_t>(s) * chunk_;
    }
    // x[s] + x[s+1] + ... left to right: each addition's operands are the ring's
    // acc = x[s+k] + acc swapped, and an fp32 addition gives the same bits either way.
    reduce::combine(out + b, ins_.data(), logical, e - b, DataType::f32, ReduceOp::sum,
                    slot(set_, s) + static_cast<std::size_t>(s) * chunk_);
  }
  barrier("the canonical-order sum");
  // 3. The other ranks' segments.
  for (int s = 0; s < logical; ++s) {
    auto [b, e] = range(s);
    if (!own(s) && e > b) std::memcpy(out + b, slot(set_, s) + static_cast<std::size_t>(s) * chunk_, (e - b) * sizeof(float));
  }
  set_ ^= 1;  // the next step uses the other set: no third barrier needed
}

}  // namespace saker::comm
