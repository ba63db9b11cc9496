#include "launcher/comm/ordered_reduce.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "launcher/comm/ring.hpp"
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

void canonical_sum(std::span<const float* const> parts, std::size_t count, float* out) {
  const int n = static_cast<int>(parts.size());
  SAKER_ASSERT(n >= 1, "canonical_sum of no parts");
  const std::vector<std::size_t> seg = Ring::even_split(count, n);
  for (int s = 0; s < n; ++s) {
    const std::size_t b = seg[static_cast<std::size_t>(s)], e = seg[static_cast<std::size_t>(s) + 1];
    // acc = x[s]; acc = x[s+k] + acc: the ring's reduce-scatter order (ring.cpp). One
    // element at a time down the workers, so out may alias any part.
    for (std::size_t i = b; i < e; ++i) {
      float acc = parts[static_cast<std::size_t>(s)][i];
      for (int k = 1; k < n; ++k) acc = parts[static_cast<std::size_t>((s + k) % n)][i] + acc;
      out[i] = acc;
    }
  }
}

OrderedReduce::OrderedReduce(Communicator& comm, int logical) : comm_(comm), map_(logical, comm.size()) {
  // Every rank constructs this with the same L, so every rank switches alike.
  if (ring_path() && comm.size() > 1) comm.set_transport(Transport::ring);
}

void OrderedReduce::sum(std::span<float* const> parts, std::size_t count, float* out) {
  const int rank = comm_.rank();
  SAKER_ASSERT(static_cast<int>(parts.size()) == map_.count(rank), "contributions do not match the logical map");
  if (ring_path()) {
    if (parts[0] != out) std::memcpy(out, parts[0], count * sizeof(float));
    if (map_.world() > 1) comm_.allreduce(out, count, DataType::f32, ReduceOp::sum);
    return;
  }
  const std::size_t widest = static_cast<std::size_t>(map_.widest());
  send_.assign(widest * count, 0.0f);
  for (std::size_t j = 0; j < parts.size(); ++j) std::memcpy(&send_[j * count], parts[j], count * sizeof(float));
  recv_.resize(static_cast<std::size_t>(map_.world()) * widest * count);
  if (map_.world() > 1) comm_.allgather(send_.data(), recv_.data(), send_.size() * sizeof(float));
  else recv_ = send_;
  std::vector<const float*> all(static_cast<std::size_t>(map_.logical()));
  for (int l = 0; l < map_.logical(); ++l) {
    const int r = map_.owner(l);
    const std::size_t slot = static_cast<std::size_t>(r) * widest + static_cast<std::size_t>(l - map_.first(r));
    all[static_cast<std::size_t>(l)] = &recv_[slot * count];
  }
  canonical_sum(all, count, out);
}

}  // namespace saker::comm
