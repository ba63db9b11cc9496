// A sum over L logical workers whose bits depend on neither the number of ranks that
// compute them nor the transport between those ranks (issue 32 §2).
//
// The canonical order is the order saker's ring allreduce gives when each of L ranks
// holds one contribution: the elements are split evenly into L segments
// (Ring::even_split), and segment s is summed around the ring from worker s:
// acc = x[s], then acc = x[s+1] + acc, ..., x[s-1] + acc (indices mod L). Every element
// is thus a fixed sequence of fp32 additions, so the result is exact and reproducible
// for any mapping of workers onto ranks.
//
// How it is reached:
//   - every rank on one node, the communicator on shared memory (its default there):
//     through a /dev/shm segment of its own (ShmOrdered, shm_ordered.hpp), for any
//     mapping. The communicator's own shared-memory allreduce sums in rank order, a
//     different order, which is why a 4-rank run on one node used to end with another
//     hash than on 4 nodes.
//   - several nodes with several ranks each, each node's ranks consecutive and each node
//     computing a logical worker (the communicator on its hierarchical transport, its
//     default there): shared memory inside a node and a ring of node leaders that passes
//     each segment's running sum on from node to node (NodeChain, ordered_nodes.hpp), for
//     any mapping. Before it, these ran the flat ring over every rank. With one worker per
//     rank the flat ring gives the same bits too, and which of the two is faster depends
//     on the network (the chain sends each node's bytes once, the ring every rank's) and
//     on the node (the chain's leader folds alone): the ranks time both per size class
//     and agree on the pick (TimedChoice, tuning.hpp), which never changes a result.
//     Small sums (NodeChain::one_exchange) are not timed: the chain takes them in one
//     exchange between nodes, fewer steps than the ring's, and the agreements' own
//     allreduce every 8th call cost about 2% of a small model's step.
//   - L == world size, one worker per rank, across nodes (or SAKER_COMM_TRANSPORT=ring):
//     one ring allreduce (the communicator is set to Transport::ring). The bytes moved
//     are exactly a ring allreduce's.
//   - any other mapping (a run shrunk onto fewer ranks than L): rank q owns the canonical
//     segments of its own logical workers; every rank sends each owner those elements of
//     each contribution it holds (Communicator::alltoallv), the owner folds them in the
//     canonical order, and an allgather shares the result. A rank holding k workers
//     sends k times a reduce-scatter's bytes, then the allgather's: the price of a
//     resized run, not of the steady state.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "launcher/comm/tuning.hpp"

namespace saker::comm {

class Communicator;
class NodeChain;
class ShmOrdered;

// Which logical workers each rank computes: contiguous blocks in logical order, rank r
// taking [first(r), first(r) + count(r)); a rank takes none when world > logical.
class LogicalMap {
 public:
  // Throws saker::Error naming the value when logical or world is below 1.
  LogicalMap(int logical, int world);
  int logical() const { return logical_; }
  int world() const { return world_; }
  int first(int rank) const;
  int count(int rank) const { return first(rank + 1) - first(rank); }
  int owner(int worker) const;  // the rank computing logical worker `worker`
  int widest() const;           // the largest count over the ranks
  std::string describe(int rank) const;  // "logical workers 2..3 of 4"

 private:
  int logical_, world_;
};

// out[i] = the canonical sum of parts[0..L-1][i] (L = parts.size()). out may alias a part.
void canonical_sum(std::span<const float* const> parts, std::size_t count, float* out);

// The canonical sum across the ranks of one communicator. Collective throughout:
// every rank constructs it with the same L and calls sum() with the same count.
class OrderedReduce {
 public:
  // Takes shared memory where ShmOrdered::usable(comm), the node chain where the
  // communicator is hierarchical and NodeChain::usable; otherwise sets comm to
  // Transport::ring when L equals its size (see the top of this file).
  OrderedReduce(Communicator& comm, int logical);
  ~OrderedReduce();
  const LogicalMap& map() const { return map_; }
  // True when one ring allreduce does it (L == world size, not on shared memory).
  bool ring_path() const { return !shm_ && !chain_ && map_.logical() == map_.world(); }
  // True when it goes through the node's shared memory (every rank on one node).
  bool shm_path() const { return shm_ != nullptr; }
  // True when it goes through each node's shared memory and a ring of node leaders.
  bool chain_path() const { return chain_ != nullptr; }
  // parts: this rank's map().count(rank) contributions, in logical order, `count` floats
  // each; out (count floats) receives the canonical sum on every rank. On the ring path
  // parts[0] may be out itself (reduced in place).
  void sum(std::span<float* const> parts, std::size_t count, float* out);

 private:
  void owner_sum(std::span<float* const> parts, std::size_t count, float* out);
  void chain_or_ring(std::span<float* const> parts, std::size_t count, float* out);

  Communicator& comm_;
  LogicalMap map_;
  std::unique_ptr<ShmOrdered> shm_;
  std::unique_ptr<NodeChain> chain_;
  TimedChoice flat_ring_;  // second(): the flat ring instead of the chain (one worker per rank)
  std::vector<float> send_, recv_, gathered_;
};

}  // namespace saker::comm
