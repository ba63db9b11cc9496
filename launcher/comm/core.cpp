#include "launcher/comm/core.hpp"

#include <map>

#include "launcher/comm/reduce.hpp"

namespace saker::comm {

Topology Topology::from_peers(const std::vector<PeerInfo>& peers) {
  Topology t;
  std::map<std::string, int> index;
  for (std::size_t r = 0; r < peers.size(); ++r) {
    auto [it, fresh] = index.try_emplace(peers[r].node, static_cast<int>(t.members.size()));
    if (fresh) {
      t.members.emplace_back();
      t.leaders.push_back(static_cast<int>(r));
    }
    t.node_of.push_back(it->second);
    t.members[static_cast<std::size_t>(it->second)].push_back(static_cast<int>(r));
  }
  return t;
}

static std::vector<int> all_ranks(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// How this rank drives its links: from the machine's CPUs and the ranks of the job
// that share them (tuning.hpp).
static int ranks_on_this_machine(const Mesh& mesh) {
  int here = 0;
  for (int r = 0; r < mesh.size(); ++r) here += mesh.peer(r).machine == mesh.peer(mesh.rank()).machine ? 1 : 0;
  return here;
}

LinkPlan plan_for(const Mesh& mesh) {
  return plan_links(cores_online(), ranks_on_this_machine(mesh), last_level_cache());
}

// Transit::encrypt: every link's directions sealed with the keys of its handshake.
std::unique_ptr<aead::LinkCiphers> ciphers_for(Mesh& mesh, const Options& options) {
  if (options.transit != Transit::encrypt) return nullptr;
  return std::make_unique<aead::LinkCiphers>(
      [&mesh](int peer, int channel) {
        const auth::LinkKeys& k = mesh.link_keys(peer, channel);
        return std::make_pair(k.send, k.recv);
      },
      [&mesh](int peer) { return mesh.who(peer); }, aead::crypto_threads(ranks_on_this_machine(mesh)));
}

Core::Core(Mesh& mesh, const Topology& topo, int channel, const Options& options, Timeline* timeline)
    : mesh_(mesh), topo_(topo), ciphers_(ciphers_for(mesh, options)),
      ring_(mesh, all_ranks(mesh.size()), channel, options.chunk_bytes, plan_for(mesh), ciphers_.get()),
      timeline_(timeline) {
  int node = topo.node_of[static_cast<std::size_t>(mesh.rank())];
  const auto& local = topo.members[static_cast<std::size_t>(node)];
  if (local.size() > 1) {
    // Slots shrink as ranks per node grow so the segment stays a few MiB.
    std::size_t slot = std::max<std::size_t>(64 * 1024, (4u << 20) / local.size());
    int stripes = stripes_for_node(cores_online(), ranks_on_this_machine(mesh));
    shm_ = std::make_unique<ShmGroup>(mesh, local, channel, slot, stripes, stripe_threads(stripes));
  }
  if (topo.leaders.size() > 1 && local.front() == mesh.rank())
    leaders_ = std::make_unique<Ring>(mesh, topo.leaders, channel, options.chunk_bytes, plan_for(mesh), ciphers_.get());
}

Transport Core::resolve(Transport wanted, const Topology& topo) {
  std::size_t nodes = topo.members.size();
  bool one_per_node = nodes == topo.node_of.size();
  if (wanted == Transport::automatic) {
    if (nodes == 1) return Transport::shm;
    return one_per_node ? Transport::ring : Transport::hierarchical;
  }
  if (wanted == Transport::shm && nodes > 1) return Transport::hierarchical;
  return wanted;
}

int Core::ring_size(Transport t) const {
  if (t == Transport::ring) return ring_.size();
  if (t == Transport::hierarchical) return static_cast<int>(topo_.leaders.size());
  return 1;
}

void Core::allreduce(void* data, std::size_t count, DataType type, ReduceOp op, Transport t,
                     const std::vector<std::size_t>& segs) {
  ReduceOp base = op == ReduceOp::avg ? ReduceOp::sum : op;
  const bool publish = counters_ && counters_->active();  // SAKER_TELEMETRY_DIR: time each call
  const auto started = publish ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  std::string args = "{\"bytes\":" + std::to_string(count * size_of(type)) + "}";
  if (t == Transport::ring || mesh_.size() == 1) {
    Timeline::Scope s(timeline_, "ring reduce-scatter+allgather", "transfer", kTidTransfer, args);
    ring_.allreduce(data, count, type, base, segs);
  } else if (t == Transport::shm) {
    Timeline::Scope s(timeline_, "shm reduce", "reduce", kTidTransfer, args);
    shm_->allreduce(data, count, type, base);
  } else {
    // Hierarchical: reduce inside the node, ring among node leaders, share inside the node.
    {
      Timeline::Scope s(timeline_, "shm reduce (node)", "reduce", kTidTransfer, args);
      if (shm_) shm_->allreduce(data, count, type, base);
    }
    if (leaders_) {
      Timeline::Scope s(timeline_, "ring among node leaders", "transfer", kTidTransfer, args);
      leaders_->allreduce(data, count, type, base, segs);
    }
    if (shm_) {
      Timeline::Scope s(timeline_, "shm broadcast (node)", "transfer", kTidTransfer, args);
      shm_->broadcast(data, count * size_of(type), 0);
    }
  }
  if (op == ReduceOp::avg) reduce::scale_for_avg(data, count, type, mesh_.size());
  if (publish)
    counters_->allreduce_done(count * size_of(type), static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                         std::chrono::steady_clock::now() - started).count()));
}

void Core::broadcast(void* data, std::size_t bytes, int root) { ring_.broadcast(data, bytes, root); }

void Core::allgather(const void* send, void* recv, std::size_t bytes, Transport t) {
  if (ShmGroup* shm = shm_for(t))
    shm->allgather(send, recv, bytes);
  else
    ring_.allgather(send, recv, bytes);
}

}  // namespace saker::comm
