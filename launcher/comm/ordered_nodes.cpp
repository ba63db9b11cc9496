#include "launcher/comm/ordered_nodes.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {
namespace {

// The most one window holds of a worker's terms: 4 MiB (the leader holds its node's
// terms of one window at once; a larger window saves little, since every window costs
// N + 1 steps between nodes whatever its size).
constexpr std::size_t kTermBytes = 4u << 20;
constexpr std::size_t kLineFloats = 16;  // 64 bytes
// The node's shared-memory segment (ShmGroup: two slots a member) stays within 32 MiB,
// with slots of 1 to 8 MiB: each round of the gather and the broadcast costs a barrier,
// which on a loaded node can take a scheduler slice: a 16 MiB sum on 2 x 2 emulated ranks
// of a 2-vCPU machine took 193 ms with 1 MiB slots, 84 ms with 8 MiB (the flat ring:
// 106 and 57 ms in the same runs; bench_train_logical_sum ... flat).
constexpr std::size_t kSegmentBudget = 32u << 20;
// Sums of at most this many bytes of terms in all (count x L floats) take one exchange
// between the leaders instead of the chain's N + 1 steps (sum_gathered): saker-train's
// default gradient (6536 floats, L = 4) on 2 x 2 emulated ranks took 62 us through the
// chain against 41 us for the communicator's own hierarchical allreduce.
constexpr std::size_t kGatherAllBytes = 256u << 10;

std::size_t slot_for(std::size_t members) {
  return std::clamp<std::size_t>(kSegmentBudget / (2 * members), 1u << 20, 8u << 20);
}

std::size_t window_for(int logical) {
  const std::size_t w = kTermBytes / sizeof(float) / static_cast<std::size_t>(logical);
  return std::max(kLineFloats, w / kLineFloats * kLineFloats);
}

}  // namespace

bool NodeChain::usable(const Topology& topo, const LogicalMap& map) {
  const std::size_t nodes = topo.members.size();
  if (nodes < 2 || nodes == topo.node_of.size()) return false;  // one node, or one rank a node
  int next = 0;
  for (const auto& m : topo.members) {
    for (int r : m)
      if (r != next++) return false;  // this node's ranks are not the run after the last node's
    if (map.first(m.back() + 1) == map.first(m.front())) return false;  // a node without workers
  }
  return true;
}

NodeChain::NodeChain(Mesh& mesh, const Topology& topo, const Options& options, const LogicalMap& map,
                     aead::LinkCiphers* ciphers)
    : map_(map),
      rank_(mesh.rank()),
      node_(topo.node_of[static_cast<std::size_t>(mesh.rank())]),
      nodes_(static_cast<int>(topo.members.size())),
      members_(topo.members[static_cast<std::size_t>(node_)]),
      leader_(members_.front() == mesh.rank()),
      window_(window_for(map.logical())) {
  SAKER_ASSERT(usable(topo, map) && map.world() == mesh.size(), "node chain built for a layout it cannot take");
  for (const auto& m : topo.members) first_.push_back(map.first(m.front()));
  first_.push_back(map.logical());
  if (leader_) leaders_ = std::make_unique<Ring>(mesh, topo.leaders, kChannel, options.chunk_bytes, plan_for(mesh), ciphers);
  if (members_.size() > 1) shm_ = std::make_unique<ShmGroup>(mesh, members_, kChannel, slot_for(members_.size()));
}

NodeChain::~NodeChain() = default;

bool NodeChain::one_exchange(std::size_t count) const {
  return count * static_cast<std::size_t>(map_.logical()) * sizeof(float) <= kGatherAllBytes;
}

NodeChain::Window NodeChain::window_at(const std::vector<std::size_t>& seg, std::size_t index) const {
  const auto logical = static_cast<std::size_t>(map_.logical());
  Window w;
  w.lo.resize(logical), w.len.resize(logical), w.at.resize(logical + 1);
  for (std::size_t s = 0; s < logical; ++s) {
    w.lo[s] = std::min(seg[s + 1], seg[s] + index * window_);
    w.len[s] = std::min(seg[s + 1], w.lo[s] + window_) - w.lo[s];
    w.at[s] = w.total;
    w.total += w.len[s];
  }
  w.at[logical] = w.total;
  return w;
}

void NodeChain::sum(std::span<float* const> parts, std::size_t count, float* out) {
  SAKER_ASSERT(static_cast<int>(parts.size()) == map_.count(rank_), "contributions do not match the logical map");
  if (count == 0) return;
  const std::vector<std::size_t> seg = Ring::even_split(count, map_.logical());
  if (one_exchange(count)) return sum_gathered(parts, seg, count, out);
  std::size_t longest = 0;
  for (std::size_t s = 0; s + 1 < seg.size(); ++s) longest = std::max(longest, seg[s + 1] - seg[s]);
  const int f = first_[static_cast<std::size_t>(node_)], e = first_[static_cast<std::size_t>(node_) + 1];
  for (std::size_t index = 0; index * window_ < longest; ++index) {
    const Window w = window_at(seg, index);
    gather_terms(parts, w);
    if (leader_) {
      acc_.resize(w.total);
      for (int s = f; s < e; ++s) fold(parts, w, s, s, e, false);  // step 0: from s to the run's end
      for (int k = 1; k <= nodes_; ++k) {
        const int send_node = (node_ - k + 1 + 2 * nodes_) % nodes_, recv_node = (node_ - k + 2 * nodes_) % nodes_;
        pass_on(w, send_node, recv_node);
        if (k < nodes_) {  // another node's segments: this node's whole run
          for (int s = first_[static_cast<std::size_t>(recv_node)]; s < first_[static_cast<std::size_t>(recv_node) + 1]; ++s)
            fold(parts, w, s, f, e, true);
        } else {  // back home after every other node: the run's start up to s
          for (int s = f; s < e; ++s) fold(parts, w, s, f, s, true);
        }
      }
    }
    share_results(w);
    // Only now: out may be parts[0], whose elements of this window were read above.
    for (std::size_t s = 0; s < w.len.size(); ++s)
      if (w.len[s] > 0) std::memcpy(out + w.lo[s], acc_.data() + w.at[s], w.len[s] * sizeof(float));
  }
}

// A small sum: every node's terms to every leader in one allgather, and each leader folds
// every segment s alone, x[s] + x[s+1] + ... + x[s-1] left to right: the chain's additions in
// the chain's order (combine folds its inputs left to right), so the same bits.
void NodeChain::sum_gathered(std::span<float* const> parts, const std::vector<std::size_t>& seg, std::size_t count,
                             float* out) {
  const Window w = window_at(seg, 0);
  SAKER_ASSERT(w.total == count && w.at[0] == 0, "a small sum spans more than one window");
  gather_terms(parts, w);  // a worker's row is now its whole vector, segments in order
  acc_.resize(count);
  if (leader_) {
    const auto at = [&](int m) { return first_[static_cast<std::size_t>(m)]; };
    int widest = 0;
    for (int m = 0; m < nodes_; ++m) widest = std::max(widest, at(m + 1) - at(m));
    const std::size_t block = static_cast<std::size_t>(widest) * count;
    pack_.resize(block);
    for (int l = at(node_); l < at(node_ + 1); ++l)
      std::memcpy(&pack_[static_cast<std::size_t>(l - at(node_)) * count], term(parts, w, l, 0), count * sizeof(float));
    gathered_.resize(static_cast<std::size_t>(nodes_) * block);
    leaders_->allgather(pack_.data(), gathered_.data(), block * sizeof(float));
    const int logical = map_.logical();
    std::vector<const float*> row(static_cast<std::size_t>(logical));
    for (int m = 0, l = 0; m < nodes_; ++m)
      for (; l < at(m + 1); ++l)
        row[static_cast<std::size_t>(l)] = &gathered_[static_cast<std::size_t>(m) * block +
                                                      static_cast<std::size_t>(l - at(m)) * count];
    for (int s = 0; s < logical; ++s) {
      const std::size_t lo = seg[static_cast<std::size_t>(s)], len = seg[static_cast<std::size_t>(s) + 1] - lo;
      if (len == 0) continue;
      ins_.clear();
      for (int k = 0; k < logical; ++k) ins_.push_back(row[static_cast<std::size_t>((s + k) % logical)] + lo);
      reduce::combine(acc_.data() + lo, ins_.data(), logical, len, DataType::f32, ReduceOp::sum);
    }
  }
  if (shm_) shm_->broadcast(acc_.data(), count * sizeof(float), 0);
  std::memcpy(out, acc_.data(), count * sizeof(float));  // only now: out may be parts[0]
}

// The node's terms of this window to its leader, packed (worker by worker, each the
// window's segments in order), through the node's shared memory.
void NodeChain::gather_terms(std::span<float* const> parts, const Window& w) {
  if (!shm_) return;
  const std::size_t n = members_.size(), row = w.total * sizeof(float);
  std::vector<std::size_t> send(n, 0), recv(n, 0);
  std::size_t widest = 0;
  for (std::size_t i = 1; i < n; ++i) {
    const std::size_t bytes = static_cast<std::size_t>(map_.count(members_[i])) * row;
    widest = std::max(widest, bytes);
    if (leader_) recv[i] = bytes;
  }
  if (leader_) {
    std::size_t total = 0;
    for (std::size_t b : recv) total += b;
    terms_.resize(total / sizeof(float));
  } else {
    pack_.resize(parts.size() * w.total);
    for (std::size_t j = 0; j < parts.size(); ++j)
      for (std::size_t s = 0; s < w.len.size(); ++s)
        if (w.len[s] > 0)
          std::memcpy(&pack_[j * w.total + w.at[s]], parts[j] + w.lo[s], w.len[s] * sizeof(float));
    send[0] = pack_.size() * sizeof(float);
  }
  shm_->alltoallv(reinterpret_cast<const char*>(pack_.data()), send, reinterpret_cast<char*>(terms_.data()), recv,
                  widest);
}

// Worker l's elements of segment s in this window, on the leader: its own workers' straight
// from their buffers, the node's others' from what gather_terms brought.
const float* NodeChain::term(std::span<float* const> parts, const Window& w, int l, int s) const {
  const int mine = map_.first(rank_), end = mine + map_.count(rank_);
  const auto at = w.at[static_cast<std::size_t>(s)];
  if (l < end) return parts[static_cast<std::size_t>(l - mine)] + w.lo[static_cast<std::size_t>(s)];
  return terms_.data() + static_cast<std::size_t>(l - end) * w.total + at;
}

// acc = x[from] + ... + x[to - 1] (onto: acc + x[from] + ...), left to right.
void NodeChain::fold(std::span<float* const> parts, const Window& w, int s, int from, int to, bool onto) {
  const std::size_t len = w.len[static_cast<std::size_t>(s)];
  if (len == 0 || from == to) return;
  float* acc = acc_.data() + w.at[static_cast<std::size_t>(s)];
  ins_.clear();
  if (onto) ins_.push_back(acc);
  for (int l = from; l < to; ++l) ins_.push_back(term(parts, w, l, s));
  reduce::combine(acc, ins_.data(), static_cast<int>(ins_.size()), len, DataType::f32, ReduceOp::sum);
}

// The running sums of send_node's segments to the next leader, while the previous leader's
// of recv_node's segments arrive (the ranges never overlap: the nodes differ).
void NodeChain::pass_on(const Window& w, int send_node, int recv_node) {
  auto lo = [&](int m) { return w.at[static_cast<std::size_t>(first_[static_cast<std::size_t>(m)])]; };
  auto bytes = [&](int m) { return (lo(m + 1) - lo(m)) * sizeof(float); };
  std::vector<std::size_t> send(static_cast<std::size_t>(nodes_), 0), recv(send);
  send[static_cast<std::size_t>((node_ + 1) % nodes_)] = bytes(send_node);
  recv[static_cast<std::size_t>((node_ - 1 + nodes_) % nodes_)] = bytes(recv_node);
  leaders_->alltoallv(reinterpret_cast<const char*>(acc_.data() + lo(send_node)), send,
                      reinterpret_cast<char*>(acc_.data() + lo(recv_node)), recv);
}

// The leaders' finished segments to every leader (padded to the widest node's), then each
// leader's whole window to its node's ranks.
void NodeChain::share_results(const Window& w) {
  auto lo = [&](int m) { return w.at[static_cast<std::size_t>(first_[static_cast<std::size_t>(m)])]; };
  if (leader_) {
    std::size_t widest = 0;
    for (int m = 0; m < nodes_; ++m) widest = std::max(widest, lo(m + 1) - lo(m));
    pack_.assign(widest, 0.0f);
    std::copy(acc_.begin() + static_cast<std::ptrdiff_t>(lo(node_)), acc_.begin() + static_cast<std::ptrdiff_t>(lo(node_ + 1)),
              pack_.begin());
    gathered_.resize(static_cast<std::size_t>(nodes_) * widest);
    leaders_->allgather(pack_.data(), gathered_.data(), widest * sizeof(float));
    for (int m = 0; m < nodes_; ++m)
      if (m != node_)
        std::copy_n(gathered_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(m) * widest),
                    lo(m + 1) - lo(m), acc_.begin() + static_cast<std::ptrdiff_t>(lo(m)));
  } else {
    acc_.resize(w.total);
  }
  if (shm_) shm_->broadcast(acc_.data(), w.total * sizeof(float), 0);
}

}  // namespace saker::comm
