#include "launcher/comm/ordered_reduce.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/ordered_nodes.hpp"
#include "launcher/comm/reduce.hpp"
#include "launcher/comm/ring.hpp"
#include "launcher/comm/shm_ordered.hpp"
#include "saker/comm.hpp"

namespace saker::comm {

LogicalMap::LogicalMap(int logical, int world) : logical_(logical), world_(world) {
  if (logical < 1 || world < 1) {
    throw Error(explain(std::to_string(logical) + " logical workers over " + std::to_string(world) + " ranks",
                        "both must be at least 1", "pass --logical-ranks 1 or more"));
  }
}

int LogicalMap::first(int rank) const {
  const int r = std::clamp(rank, 0, world_);
  return static_cast<int>(static_cast<long long>(logical_) * r / world_);
}

int LogicalMap::owner(int worker) const {
  SAKER_ASSERT(worker >= 0 && worker < logical_, "logical worker outside the run");
  // first() is monotone: the owner is the last rank whose block starts at or before it.
  int r = static_cast<int>(static_cast<long long>(worker) * world_ / logical_);
  while (r + 1 < world_ && first(r + 1) <= worker) ++r;
  while (first(r) > worker || count(r) == 0) --r;
  return r;
}

int LogicalMap::widest() const {
  int w = 0;
  for (int r = 0; r < world_; ++r) w = std::max(w, count(r));
  return w;
}

std::string LogicalMap::describe(int rank) const {
  const int n = count(rank), f = first(rank);
  const std::string of = " of " + std::to_string(logical_);
  if (n == 0) return "no logical worker" + of;
  if (n == 1) return "logical worker " + std::to_string(f) + of;
  return "logical workers " + std::to_string(f) + ".." + std::to_string(f + n - 1) + of;
}

namespace {

// Segment s of the canonical sum: at[l] points at worker l's `len` elements of it.
// acc = x[s]; acc = x[s+k] + acc: the ring's reduce-scatter order (ring.cpp). One element
// at a time down the workers, so out may alias any part.
void fold_segment(const std::vector<const float*>& at, int s, std::size_t len, float* out) {
  const int n = static_cast<int>(at.size());
  for (std::size_t i = 0; i < len; ++i) {
    float acc = at[static_cast<std::size_t>(s)][i];
    for (int k = 1; k < n; ++k) acc = at[static_cast<std::size_t>((s + k) % n)][i] + acc;
    out[i] = acc;
  }
}

}  // namespace

// Segment s is reduce::combine over the parts from s on (vectorised: this runs on every
// rank of a small shared-memory sum and on a lone rank, every step): x[s] + x[s+1] + ...
// left to right, each addition the ring's acc = x[s+k] + acc with its operands swapped,
// the same bits. combine() lets out alias only its first input; where out is another
// part, fold_segment (element by element) does that segment.
void canonical_sum(std::span<const float* const> parts, std::size_t count, float* out) {
  const int n = static_cast<int>(parts.size());
  SAKER_ASSERT(n >= 1, "canonical_sum of no parts");
  const std::vector<std::size_t> seg = Ring::even_split(count, n);
  std::vector<const float*> at(parts.size());
  std::vector<const void*> ins(parts.size());
  const bool aliased = std::find(parts.begin(), parts.end(), out) != parts.end();
  for (int s = 0; s < n; ++s) {
    const std::size_t b = seg[static_cast<std::size_t>(s)], len = seg[static_cast<std::size_t>(s) + 1] - b;
    if (aliased && parts[static_cast<std::size_t>(s)] != out) {
      for (std::size_t l = 0; l < parts.size(); ++l) at[l] = parts[l] + b;
      fold_segment(at, s, len, out + b);
      continue;
    }
    for (int k = 0; k < n; ++k) ins[static_cast<std::size_t>(k)] = parts[static_cast<std::size_t>((s + k) % n)] + b;
    if (len > 0) reduce::combine(out + b, ins.data(), n, len, DataType::f32, ReduceOp::sum);
  }
}

OrderedReduce::OrderedReduce(Communicator& comm, int logical) : comm_(comm), map_(logical, comm.size()) {
  // Every rank constructs this with the same L on the same topology, so every rank
  // takes the same path.
  Communicator::Impl& impl = *comm.impl_;
  if (ShmOrdered::usable(comm)) shm_ = std::make_unique<ShmOrdered>(comm, map_);
  else if (comm.transport() == Transport::hierarchical && NodeChain::usable(impl.topo, map_)) {
    if (!impl.chain_ciphers) impl.chain_ciphers = ciphers_for(*impl.mesh, impl.options);
    chain_ = std::make_unique<NodeChain>(*impl.mesh, impl.topo, impl.options, map_, impl.chain_ciphers.get());
  }
  else if (ring_path() && comm.size() > 1) comm.set_transport(Transport::ring);
}

OrderedReduce::~OrderedReduce() = default;

void OrderedReduce::sum(std::span<float* const> parts, std::size_t count, float* out) {
  const int rank = comm_.rank();
  SAKER_ASSERT(static_cast<int>(parts.size()) == map_.count(rank), "contributions do not match the logical map");
  if (shm_) {
    shm_->sum(parts, count, out);
    return;
  }
  if (chain_) {
    if (map_.logical() == map_.world() && !chain_->one_exchange(count)) chain_or_ring(parts, count, out);
    else chain_->sum(parts, count, out);
    return;
  }
  if (ring_path()) {
    if (parts[0] != out) std::memcpy(out, parts[0], count * sizeof(float));
    if (map_.world() > 1) comm_.allreduce(out, count, DataType::f32, ReduceOp::sum);
    return;
  }
  if (map_.world() == 1) {
    canonical_sum(std::vector<const float*>(parts.begin(), parts.end()), count, out);
    return;
  }
  owner_sum(parts, count, out);
}

// The node chain or one ring allreduce over every rank (one worker per rank: the canonical
// order is that ring's), whichever the ranks found faster for this size (see the top of
// ordered_reduce.hpp). As Ring::send_thread_for: the slowest rank's figure for each way
// decides, so every rank picks the same, and the schedule of agreements counts calls only.
void OrderedReduce::chain_or_ring(std::span<float* const> parts, std::size_t count, float* out) {
  const std::size_t bytes = count * sizeof(float);
  if (flat_ring_.agreement_due(bytes)) {
    std::array<double, 2> pooled = flat_ring_.figures(bytes);
    comm_.allreduce(pooled.data(), pooled.size(), DataType::f64, ReduceOp::max);  // max: any order
    flat_ring_.agree(bytes, pooled[1] < pooled[0]);
  }
  const bool ring = flat_ring_.second(bytes);
  const auto started = std::chrono::steady_clock::now();
  if (ring) {
    if (parts[0] != out) std::memcpy(out, parts[0], bytes);
    Communicator::Impl& i = *comm_.impl_;
    i.run_sync([&] { i.user->allreduce(out, count, DataType::f32, ReduceOp::sum, Transport::ring); });
  } else {
    chain_->sum(parts, count, out);
  }
  flat_ring_.record(bytes, ring, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

// Rank q reduces the canonical segments of its own logical workers,
// [seg[first(q)], seg[first(q) + count(q)]): every rank sends it those elements of each of
// its workers' contributions (alltoallv), q folds each segment in the canonical order,
// and an allgather (padded to the longest range) gives everyone the whole sum.
void OrderedReduce::owner_sum(std::span<float* const> parts, std::size_t count, float* out) {
  const int world = map_.world(), rank = comm_.rank(), logical = map_.logical();
  const std::vector<std::size_t> seg = Ring::even_split(count, logical);
  auto lo = [&](int q) { return seg[static_cast<std::size_t>(map_.first(q))]; };
  auto len = [&](int q) { return seg[static_cast<std::size_t>(map_.first(q) + map_.count(q))] - lo(q); };
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(world)), recv_counts(send_counts);
  send_.clear();
  for (int q = 0; q < world; ++q) {
    for (float* part : parts) send_.insert(send_.end(), part + lo(q), part + lo(q) + len(q));
    send_counts[static_cast<std::size_t>(q)] = parts.size() * len(q);
    recv_counts[static_cast<std::size_t>(q)] = static_cast<std::size_t>(map_.count(q)) * len(rank);
  }
  recv_.resize(static_cast<std::size_t>(logical) * len(rank));
  comm_.alltoallv(send_.data(), send_counts, recv_.data(), recv_counts, 1, DataType::f32, "ordered_reduce");
  // Rank p's block holds its workers' pieces in logical order: worker l's is the
  // (l - first(p))-th; the blocks come in rank order, so worker l's piece is the l-th.
  const std::size_t mine = len(rank), widest = [&] {
    std::size_t w = 0;
    for (int q = 0; q < world; ++q) w = std::max(w, len(q));
    return w;
  }();
  std::vector<float> reduced(widest, 0.0f);
  std::vector<const float*> at(static_cast<std::size_t>(logical));
  for (int s = map_.first(rank); s < map_.first(rank) + map_.count(rank); ++s) {
    const std::size_t b = seg[static_cast<std::size_t>(s)] - lo(rank);
    for (int l = 0; l < logical; ++l) at[static_cast<std::size_t>(l)] = &recv_[static_cast<std::size_t>(l) * mine + b];
    fold_segment(at, s, seg[static_cast<std::size_t>(s) + 1] - seg[static_cast<std::size_t>(s)], &reduced[b]);
  }
  gathered_.resize(static_cast<std::size_t>(world) * widest);
  comm_.allgather(reduced.data(), gathered_.data(), widest * sizeof(float));
  for (int q = 0; q < world; ++q)
    std::memcpy(out + lo(q), &gathered_[static_cast<std::size_t>(q) * widest], len(q) * sizeof(float));
}

}  // namespace saker::comm
