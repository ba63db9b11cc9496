// The canonical-order sum over L logical workers (ordered_reduce.hpp) on several nodes with
// several ranks each: shared memory inside a node, the network only between nodes, and
// bit for bit the flat canonical sum (issue 32 §2).
//
// Each element of canonical segment s is one sequential fold over the workers s, s+1, ...,
// L-1, 0, ..., s-1. The workers are contiguous blocks of ranks (LogicalMap) and, here, each
// node's ranks are consecutive, so node j computes the contiguous run of workers
// [F_j, E_j), and the fold of a segment s that node j owns (F_j <= s < E_j) visits node j's
// run from s to its end, then each other node's whole run in node order, then node j's run
// from F_j up to s - 1. So the running sum is passed on around a ring of node leaders:
//   step 0:     leader j folds x[s] + ... + x[E_j - 1] for each of its node's segments;
//   step k < N: it sends what it holds to leader j + 1, receives leader j - 1's, and adds
//               its node's whole run to each received sum, term by term, in worker order;
//   step N:     what it receives are its own segments' sums, after every other node: it
//               adds x[F_j] + ... + x[s - 1] (nothing for s = F_j) and has the result.
// Every addition is acc = acc + x[next], the flat order's acc = x[next] + acc with its
// operands swapped: an fp32 addition gives the same bits either way, so the result equals
// canonical_sum's for any chunking. A node's ranks hand their workers' terms to the leader
// through the node's shared memory (ShmGroup::alltoallv), the leaders share the finished
// segments (Ring::allgather) and each leader hands the whole sum to its node's ranks
// (ShmGroup::broadcast). Large sums go window by window (a chunk of every segment at a
// time), so that memory stays bounded. Small sums (count x L floats within 256 KiB) skip
// the N + 1 steps: the leaders allgather every node's terms at once and each folds every
// segment in the same order alone (sum_gathered), one exchange between nodes.
//
// Bytes between nodes: each leader sends about the whole buffer once around the ring and
// (N-1)/N of it in the allgather, whatever the ranks per node; the flat ring over all R
// ranks sends 2(R-1)/R of it from every rank, all of a node's ranks through one link.
//
// Its links and segment use a channel of their own (kChannel), so that it never
// interleaves with the communicator's own calls; the chains of one communicator run one at a
// time (they share those links; the sealing of them lives in the communicator).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "launcher/comm/core.hpp"
#include "launcher/comm/ordered_reduce.hpp"

namespace saker::comm {

class NodeChain {
 public:
  // The communicator channel of the chain's links and shared-memory segment (0 and 1 are
  // the communicator's own).
  static constexpr int kChannel = 2;
  // Whether this layout takes the chain: more than one node, some node with more than
  // one rank, each node's ranks consecutive, and every node computing a logical worker.
  static bool usable(const Topology& topo, const LogicalMap& map);
  // Collective over every rank of the mesh, all with the same map. ciphers: the sealed
  // directions of kChannel's links under Transit::encrypt (null otherwise), which outlive
  // the chain and serve every chain on this mesh. Throws saker::Error naming the peer or
  // the segment when a node's shared memory cannot be set up.
  NodeChain(Mesh& mesh, const Topology& topo, const Options& options, const LogicalMap& map,
            aead::LinkCiphers* ciphers);
  ~NodeChain();
  NodeChain(const NodeChain&) = delete;
  NodeChain& operator=(const NodeChain&) = delete;

  // As OrderedReduce::sum: this rank's map.count(rank) contributions in logical order;
  // out (which may be parts[0]) receives the canonical sum on every rank.
  void sum(std::span<float* const> parts, std::size_t count, float* out);
  // Whether a sum of count floats takes one exchange between the nodes (sum_gathered):
  // then no other path is faster, and OrderedReduce does not time one against it.
  bool one_exchange(std::size_t count) const;
  // Elements of each canonical segment one window carries.
  std::size_t window() const { return window_; }

 private:
  // One window: elements [lo[s], lo[s] + len[s]) of every segment s.
  struct Window {
    std::vector<std::size_t> lo, len, at;  // at: segment s's place in the packed window
    std::size_t total = 0;
  };
  Window window_at(const std::vector<std::size_t>& seg, std::size_t index) const;
  void sum_gathered(std::span<float* const> parts, const std::vector<std::size_t>& seg, std::size_t count, float* out);
  void gather_terms(std::span<float* const> parts, const Window& w);
  const float* term(std::span<float* const> parts, const Window& w, int worker, int s) const;
  // acc[s] (+)= terms of workers [from, to) of segment s, in worker order.
  void fold(std::span<float* const> parts, const Window& w, int s, int from, int to, bool onto);
  void pass_on(const Window& w, int send_node, int recv_node);
  void share_results(const Window& w);

  LogicalMap map_;
  int rank_, node_, nodes_;
  std::vector<int> members_;      // this node's ranks
  std::vector<int> first_;        // node j computes workers [first_[j], first_[j + 1])
  bool leader_;
  std::unique_ptr<Ring> leaders_;       // the node leaders (on the leader only)
  std::unique_ptr<ShmGroup> shm_;       // this node's ranks (when more than one)
  std::size_t window_ = 0;
  std::vector<float> pack_, terms_, acc_, gathered_;
  std::vector<const void*> ins_;
};

}  // namespace saker::comm
