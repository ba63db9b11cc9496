// Single-copy alltoall and allgather among the ranks of one node (cma.hpp), as members of
// ShmGroup: the addresses and verdicts travel through its slots and barriers.
#include "launcher/comm/cma.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <random>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/comm/tuning.hpp"
#include "launcher/comm/shm.hpp"

namespace saker::comm {
namespace cma {
namespace {

constexpr std::uint64_t kMagic = 0x53414b4552434d41ull;  // "SAKERCMA"
std::atomic<int> fail_next{0};
std::atomic<bool> skewed{false};

std::uint64_t fresh_word() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;  // never 0
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

void fail_next_pulls_for_testing(int n) { fail_next.store(n); }
void skew_timings_for_testing(bool on) { skewed.store(on); }
bool timings_skewed_for_testing() { return skewed.load(); }

bool pull(pid_t pid, std::uint64_t remote, void* local, std::size_t bytes) noexcept {
  if (int f = fail_next.load(); f > 0 && fail_next.compare_exchange_strong(f, f - 1)) {
    counters().failures.fetch_add(1);
    return false;
  }
  auto* to = static_cast<char*>(local);
  std::size_t done = 0;
  while (done < bytes) {
    // One iovec each side: the kernel may stop short (at a fault in the peer's range);
    // ask again for the rest, which then fails with EFAULT if the range is bad.
    iovec l{to + done, bytes - done};
    iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), bytes - done};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || static_cast<std::size_t>(got) > bytes - done) {
      counters().failures.fetch_add(1);
      return false;
    }
    done += static_cast<std::size_t>(got);
  }
  counters().pulls.fetch_add(1);
  return true;
}

bool PathChoice::single(std::size_t bytes) const {
  const Class& c = by_size_[size_class(bytes)];
  if (c.calls < 16 || c.agreed < 0) return (c.calls / 4) % 2 == 1;
  return c.calls % 64 >= 60 ? c.agreed == 0 : c.agreed == 1;
}

void PathChoice::record(std::size_t bytes, bool single, double seconds) {
  Class& c = by_size_[size_class(bytes)];
  const int path = single ? 1 : 0;
  ++c.calls;
  if (c.last == path) c.recent[path].add(seconds / static_cast<double>(bytes));
  c.last = path;
}

bool PathChoice::agreement_due(std::size_t bytes) const {
  const std::uint64_t calls = by_size_[size_class(bytes)].calls;
  return calls >= 16 && calls % 16 == 0;
}

std::array<double, 2> PathChoice::figures(std::size_t bytes) const {
  const Class& c = by_size_[size_class(bytes)];
  return {c.recent[0].typical(), c.recent[1].typical()};
}

void PathChoice::agree(std::size_t bytes, bool single) { by_size_[size_class(bytes)].agreed = single ? 1 : 0; }

namespace {
// SAKER_COMM_CMA_MIN_BYTES, else `otherwise`.
std::size_t min_bytes_or(std::size_t otherwise) {
  std::size_t n = otherwise;
  env_size("SAKER_COMM_CMA_MIN_BYTES", &n);
  return n;
}
bool timed_by_default() {
  const char* v = std::getenv("SAKER_COMM_CMA_MIN_BYTES");
  return !v || !*v;
}
}  // namespace

// Forced only where SAKER_COMM_CMA_MIN_BYTES asks for it, and never from 8 MiB on. Measured on this
// project's 2-vCPU VM (a Firecracker guest, Linux 6.18), 2 ranks, busbw, single copy against
// the segment and OpenMPI in the same rounds (bench_collectives.sh): no robust win. The
// kernel's copy reached ~11 GB/s (OpenMPI's too, the same call); the segment's two memcpys
// 15-20 GB/s when the vCPUs share a cache, ~5.7 when not. Pinned at load ~1.4, alltoall
// 4 MiB: single copy 11.24 vs segment 5.67 in one run, 10.87 vs 15.20 in another; at load
// ~3.7, 4.26 vs 11.62 (allgather 1 MiB 3.27 vs 21.16), while in that run reduce_scatter,
// which never uses it, also varied 0.34-2.55x between the two columns. From 8 MiB it was
// 0.89-0.97x at any load; below 1 MiB blocks 0.81x. So, unless asked, alltoalls with
// blocks of 1 to 8 MiB take whichever path the group timed faster for their size class
// (ShmGroup::cma_time), and allgather the segment.
std::size_t default_min_bytes() { return min_bytes_or(std::size_t{1} << 20); }
std::size_t default_gather_min_bytes() { return min_bytes_or(kNever); }
std::size_t default_max_bytes() { return std::size_t{8} << 20; }

Offer offer(State& state) {
  state.word = fresh_word();
  const char* off = std::getenv("SAKER_COMM_CMA");
  return Offer{kMagic,
               static_cast<std::uint64_t>(getpid()),
               static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&state.word)),
               state.word,
               default_min_bytes(),
               default_gather_min_bytes(),
               default_max_bytes(),
               off && std::strcmp(off, "0") == 0 ? 0u : 1u,
               timed_by_default() ? 1u : 0u};
}

bool check(const Offer& peer) noexcept {
  if (peer.magic != kMagic || peer.pid == 0 || peer.pid > static_cast<std::uint64_t>(INT_MAX)) return false;
  std::uint64_t seen = 0;
  return pull(static_cast<pid_t>(peer.pid), peer.word_at, &seen, sizeof seen) && seen == peer.word;
}

}  // namespace cma

namespace {
// The addresses of a member's blocks (one per member) as it publishes them.
void publish_addresses(char* to, const char* base, const std::vector<std::size_t>& at) {
  for (std::size_t j = 0; j < at.size(); ++j) {
    const std::uint64_t a = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(base)) + at[j];
    std::memcpy(to + j * sizeof a, &a, sizeof a);
  }
}

std::uint64_t address_in(const char* from, std::size_t index) {
  std::uint64_t a = 0;
  std::memcpy(&a, from + index * sizeof a, sizeof a);
  return a;
}
}  // namespace

// One address per member, then whether this member left its first-round shares out.
std::size_t ShmGroup::cma_addresses_bytes() const {
  return ((members_.size() + 1) * sizeof(std::uint64_t) + 63) / 64 * 64;
}

// At set-up, after the segment is mapped: two barriers, the offers, then the verdicts.
void ShmGroup::cma_setup() {
  if (size() == 1) return;
  Lane& lane = lanes_[0];
  cma::Offer mine = cma::offer(cma_);
  std::memcpy(slot(0, lane.set, index_), &mine, sizeof mine);
  barrier(0, "setting up single-copy transfers");
  // Every member sees the same offers: if one is unwilling, none reads anything.
  bool ok = true;
  cma_.min_bytes = cma_.gather_min_bytes = 0;
  cma_.max_bytes = cma::kNever;
  cma_.timed = true;
  std::vector<cma::Offer> offers(members_.size());
  for (std::size_t j = 0; j < offers.size(); ++j) {
    std::memcpy(&offers[j], slot(0, lane.set, static_cast<int>(j)), sizeof offers[j]);
    cma_.min_bytes = std::max<std::size_t>(cma_.min_bytes, offers[j].min_bytes);
    cma_.gather_min_bytes = std::max<std::size_t>(cma_.gather_min_bytes, offers[j].gather_min_bytes);
    cma_.max_bytes = std::min<std::size_t>(cma_.max_bytes, offers[j].max_bytes);
    ok = ok && offers[j].willing == 1;
    cma_.timed = cma_.timed && offers[j].timed == 1;  // one member asking forces it for all
  }
  // Nobody asked for it (the same offers everywhere): no probe, and no second barrier.
  if (ok && cma_.min_bytes == cma::kNever && cma_.gather_min_bytes == cma::kNever) {
    lane.set ^= 1;
    cma_.on = false;
    return;
  }
  cma_.pids.assign(members_.size(), 0);
  for (std::size_t j = 0; j < offers.size() && ok; ++j) {
    if (j == static_cast<std::size_t>(index_)) continue;
    ok = cma::check(offers[j]);
    cma_.pids[j] = static_cast<pid_t>(offers[j].pid);  // used only when checked (0 < pid <= INT_MAX)
  }
  lane.set ^= 1;  // the offers stay readable until the next barrier
  cma_.on = false;  // settle() below turns nothing off, and logs nothing
  cma_.on = cma_settle(ok, "setting up single-copy transfers");
  if (!cma_.on && mine.willing == 1 && index_ == 0)
    log::debug("comm: the ranks of this node cannot read each other's memory (process_vm_readv); "
               "alltoall and allgather copy through the shared-memory segment");
}

// Every member's verdict on its reads, through the current set; one barrier. Any failure
// turns single copy off for good, on every member alike (they all read the same verdicts).
bool ShmGroup::cma_settle(bool ok, const char* during) {
  Lane& lane = lanes_[0];
  const std::uint64_t mine = ok ? 1 : 0;
  std::memcpy(slot(0, lane.set, index_), &mine, sizeof mine);
  barrier(0, during);
  bool all = true;
  for (int j = 0; j < size(); ++j) {
    std::uint64_t v = 0;
    std::memcpy(&v, slot(0, lane.set, j), sizeof v);
    all = all && v == 1;
  }
  lane.set ^= 1;
  if (!all && cma_.on) {
    cma_.on = false;
    if (index_ == 0)
      log::info(std::string("comm: a single-copy read between the ranks of this node failed during ") + during +
                "; this call and the next ones copy through the shared-memory segment");
  }
  return all;
}

// Whether an alltoall whose largest block is `bytes` goes by single copy. The PathChoice
// depends on call counts and pooled figures only, so every member, making the same calls
// with the same agreed largest block, picks the same; a member's own timings never decide.
bool ShmGroup::cma_pick(std::size_t bytes) const {
  return cma_.use(bytes) && (!cma_.timed || cma_choice_.single(bytes));
}

// After an alltoall in single copy's range that completed (single copy still on): its time
// under the path taken (cma::PathChoice); where the schedule says so (the same call on
// every member), one more barrier pools the members' figures, the slowest member's for each path deciding.
void ShmGroup::cma_time(std::size_t bytes, bool single, std::chrono::steady_clock::time_point began) {
  if (!cma_.timed || !cma_.on) return;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (cma::timings_skewed_for_testing() && single == (index_ % 2 == 0)) seconds *= 100;
  cma_choice_.record(bytes, single, seconds);
  if (!cma_choice_.agreement_due(bytes)) return;
  Lane& lane = lanes_[0];
  const std::array<double, 2> mine = cma_choice_.figures(bytes);
  std::memcpy(slot(0, lane.set, index_), mine.data(), sizeof mine);
  barrier(0, "alltoall");
  std::array<double, 2> pooled{};
  for (int j = 0; j < size(); ++j) {
    std::array<double, 2> theirs{};
    std::memcpy(theirs.data(), slot(0, lane.set, j), sizeof theirs);
    for (std::size_t k = 0; k < 2; ++k) pooled[k] = std::max(pooled[k], theirs[k]);
  }
  lane.set ^= 1;  // rewritten only after the next barrier
  cma_choice_.agree(bytes, pooled[1] < pooled[0]);
}

void ShmGroup::cma_offer_blocks(int set, std::size_t at, const char* send, bool no_shares) {
  publish_addresses(slot(0, set, index_) + at, send, send_at_);
  const std::uint64_t flag = no_shares ? 1 : 0;
  std::memcpy(slot(0, set, index_) + at + members_.size() * sizeof flag, &flag, sizeof flag);
}

// After alltoallv_start: whether a member left its first-round shares out (its own blocks
// were in single copy's range, the largest agreed block is not). Then every member, having
// read the same flags, redoes the call through the segment from the start.
bool ShmGroup::cma_shares_missing() const {
  for (int j = 0; j < size(); ++j)
    if (address_in(slot(0, lanes_[0].set ^ 1, j) + cma_at_, members_.size()) != 0) return true;
  return false;
}

// send_at_ and recv_at_ hold the blocks' offsets. started: alltoallv_start published this
// member's addresses at cma_at_ in the set before the current one, else they go out here.
// Each member pulls exactly recv_bytes[i] from member i. False (on every member) when one
// read failed: the caller then redoes the whole call through the segment.
bool ShmGroup::alltoall_cma(const char* send, char* recv, const std::vector<std::size_t>& recv_bytes, bool started) {
  Lane& lane = lanes_[0];
  int set = lane.set ^ 1;
  std::size_t at = cma_at_;
  if (!started) {
    set = lane.set;
    at = 0;
    cma_offer_blocks(set, at, send, false);
    barrier(0, "alltoall");
    lane.set ^= 1;
  }
  bool ok = true;
  const int n = size();
  for (int d = 1; d < n && ok; ++d) {
    const auto i = static_cast<std::size_t>((index_ + d) % n);
    if (recv_bytes[i] == 0) continue;
    const std::uint64_t from = address_in(slot(0, set, static_cast<int>(i)) + at, static_cast<std::size_t>(index_));
    ok = cma::pull(cma_.pids[i], from, recv + recv_at_[i], recv_bytes[i]);
  }
  return cma_settle(ok, "alltoall");  // also: no member leaves (and reuses send) before all read
}

// Member j's part lands at out + j * bytes. Peers read this member's part from its send
// buffer, not from its copy in out: that copy was just written (its lines sit dirty in this
// member's cache), and reading send measured faster.
bool ShmGroup::allgather_cma(const char* send, char* out, std::size_t bytes) {
  Lane& lane = lanes_[0];
  const int set = lane.set;
  const std::uint64_t mine = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(send));
  std::memcpy(slot(0, set, index_), &mine, sizeof mine);
  barrier(0, "allgather");
  lane.set ^= 1;
  bool ok = true;
  for (int d = 1; d < size() && ok; ++d) {
    const auto j = static_cast<std::size_t>((index_ + d) % size());
    ok = cma::pull(cma_.pids[j], address_in(slot(0, set, static_cast<int>(j)), 0), out + j * bytes, bytes);
  }
  return cma_settle(ok, "allgather");
}

}  // namespace saker::comm
