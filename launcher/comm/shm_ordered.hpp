// The canonical-order sum over L logical workers (ordered_reduce.hpp) through the node's
// shared memory, when every rank of the communicator is on one node (issue 32 §2).
//
// The element order is the canonical one, not the rank order the communicator's own
// shared-memory allreduce uses (shm.hpp): the elements are cut into L canonical segments
// (Ring::even_split(count, L)), and the rank that computes logical worker s folds segment
// s from all L contributions, starting at worker s: x[s] + x[s+1] + ... + x[s-1]. fp32
// addition is commutative, so this is bit for bit the ring's acc = x[s+k] + acc, and the
// result is the same for any world size, mapping and transport.
//
// The segment has one slot per logical worker (two sets, used alternately, as in
// shm.hpp). Each step carries a chunk of every canonical segment at once, so that every
// rank reduces in every step: a worker's slot holds L chunks of `chunk` elements,
// chunk s at s * chunk. A step runs in two barriers:
//   1. each rank copies, for each of its workers, the chunks of the segments other ranks
//      own into that worker's slot; barrier;
//   2. each rank folds its own segments' chunks (its own workers' terms straight from its
//      buffers), writes the result to `out` and into chunk s of worker s's slot (no rank
//      publishes there: worker s's rank never sends the chunks of its own segments);
//      barrier; everyone copies the other ranks' results into `out`.
// Up to 64 KiB it takes one barrier: every rank publishes its whole contributions and
// folds all of it, in the same canonical order. The bytes each rank copies are those of
// the communicator's shared-memory allreduce.
//
// The segment keeps shm.hpp's protections: created with O_CREAT|O_EXCL|O_NOFOLLOW, mode
// 0600, under a fresh name with 128 random bits; the name goes to the others over the
// communicator's authenticated links (a broadcast) before the segment exists, each member
// opens it only if fstat says it is its own uid's regular file of mode 0600 and the
// expected size, and every member unlinks it once all have mapped it (or when the start
// fails), so that a rank killed at any moment leaves nothing behind; what ranks all killed
// at once in that window leave, the next group's creator sweeps (shm_names::sweep_stale).
// Waits watch the deadline (Options::timeout) and whether each peer's process still runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "launcher/comm/ordered_reduce.hpp"

namespace saker::comm {

class Communicator;

class ShmOrdered {
 public:
  // Whether this communicator can take the path: more than one rank, all on one node,
  // and its transport is shared memory (SAKER_COMM_TRANSPORT=ring keeps it off /dev/shm).
  static bool usable(const Communicator& comm);
  // Collective: every rank of comm constructs it with the same map. Returns once every
  // rank has mapped the segment; throws saker::Error naming the segment or the peer.
  ShmOrdered(Communicator& comm, const LogicalMap& map);
  ~ShmOrdered();
  ShmOrdered(const ShmOrdered&) = delete;
  ShmOrdered& operator=(const ShmOrdered&) = delete;

  // As OrderedReduce::sum: parts are this rank's map.count(rank) contributions in
  // logical order; out (which may be parts[0]) receives the canonical sum.
  void sum(std::span<float* const> parts, std::size_t count, float* out);
  // Elements of each canonical segment one step carries (a multiple of 16: 64 bytes).
  std::size_t chunk() const { return chunk_; }

 private:
  void map_segment();
  int share_name();  // the descriptor of the segment whose name it shares
  void barrier(const char* during);
  [[noreturn]] void fail(const char* during, int peer, const std::string& why) const;
  float* slot(int set, int worker) const;
  void sum_direct(std::span<float* const> parts, std::size_t count, float* out);
  void sum_step(std::span<float* const> parts, const std::vector<std::size_t>& seg, std::size_t step, float* out);

  Communicator& comm_;
  LogicalMap map_;
  int rank_;
  std::vector<int> pids_;  // each rank's process, for the liveness checks
  std::string name_;
  std::size_t chunk_ = 0;     // elements per segment per step
  std::size_t slot_bytes_ = 0;
  std::size_t map_bytes_ = 0;
  char* base_ = nullptr;
  std::uint64_t phase_ = 0;
  int set_ = 0;
  std::vector<const void*> ins_;
};

}  // namespace saker::comm
