// One channel of collectives: the algorithms over this rank's links and shared memory.
// A communicator owns two (user calls and the fusion thread) so that the fusion
// thread's traffic never interleaves with the user's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/comm/mesh.hpp"
#include "launcher/comm/ring.hpp"
#include "launcher/comm/shm.hpp"
#include "launcher/comm/timeline.hpp"
#include "saker/comm.hpp"
#include "telemetry/comm_counters.hpp"

namespace saker::comm {

struct Topology {
  std::vector<int> node_of;               // rank -> node index (order of first appearance)
  std::vector<std::vector<int>> members;  // node index -> its ranks, ascending
  std::vector<int> leaders;               // node index -> its first rank
  static Topology from_peers(const std::vector<PeerInfo>& peers);
};

// How this rank drives its links (tuning.hpp), and under Transit::encrypt the sealed
// directions of one channel's links (null otherwise): what every Ring on the mesh takes.
LinkPlan plan_for(const Mesh& mesh);
std::unique_ptr<aead::LinkCiphers> ciphers_for(Mesh& mesh, const Options& options);

class Core {
 public:
  Core(Mesh& mesh, const Topology& topo, int channel, const Options& options, Timeline* timeline);

  // The transport automatic resolves to on this topology; a forced transport that
  // cannot work here (shm across nodes) becomes hierarchical.
  static Transport resolve(Transport wanted, const Topology& topo);
  // Size of the ring whose segment boundaries fix each element's reduction order.
  int ring_size(Transport t) const;

  // segs: ring_size(t)+1 element offsets, or empty for an even split.
  void allreduce(void* data, std::size_t count, DataType type, ReduceOp op, Transport t,
                 const std::vector<std::size_t>& segs = {});
  void broadcast(void* data, std::size_t bytes, int root);
  // Through the node's shared memory when t is shm (every rank on this node), else the ring.
  void allgather(const void* send, void* recv, std::size_t bytes, Transport t = Transport::ring);
  void barrier() { ring_.barrier(); }
  // Every rank's ring (alltoall.cpp and reduce_scatter.cpp run on it, whatever the transport).
  Ring& ring() { return ring_; }
  // The node's shared-memory group when t puts every rank on it (shm), else null: the
  // collectives that move data between every pair (alltoall) take it then.
  ShmGroup* shm_for(Transport t) { return t == Transport::shm && shm_ && shm_->size() == mesh_.size() ? shm_.get() : nullptr; }
  // Where allreduce() adds its bytes and time (SAKER_TELEMETRY_DIR); may stay null.
  void publish_to(telemetry::CommCountersPublisher* counters) { counters_ = counters; }

 private:
  Mesh& mesh_;
  const Topology& topo_;
  // Transit::encrypt: this channel's sealed links, for both rings (null otherwise).
  std::unique_ptr<aead::LinkCiphers> ciphers_;
  Ring ring_;                       // every rank
  std::unique_ptr<Ring> leaders_;   // node leaders (this rank leads its node)
  std::unique_ptr<ShmGroup> shm_;   // ranks of this node
  Timeline* timeline_;
  telemetry::CommCountersPublisher* counters_ = nullptr;
};

}  // namespace saker::comm
