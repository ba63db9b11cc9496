// Communicator: bootstrap over a store, the ordered executor for async calls, and
// the public collectives.
#include <unistd.h>

#include <random>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/comm/auth.hpp"
#include "launcher/comm/fusion.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/nccl.hpp"
#include "launcher/comm/tuning.hpp"

namespace saker::comm {

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::f32: case DataType::i32: return 4;
    case DataType::f64: case DataType::i64: return 8;
    case DataType::f16: case DataType::bf16: return 2;
  }
  return 1;
}
const char* name_of(DataType t) {
  static const char* names[] = {"fp32", "fp64", "fp16", "bf16", "int32", "int64"};
  return names[static_cast<int>(t)];
}
const char* name_of(ReduceOp op) {
  static const char* names[] = {"sum", "min", "max", "avg", "prod"};
  return names[static_cast<int>(op)];
}
const char* name_of(Transport t) {
  static const char* names[] = {"auto", "ring", "shm", "hierarchical"};
  return names[static_cast<int>(t)];
}
const char* name_of(Transit t) {
  static const char* names[] = {"auth", "encrypt", "off"};
  return names[static_cast<int>(t)];
}

// ---- Handle ----
void Handle::wait() {
  if (!state_) throw Error("saker: wait() on an empty handle: it was default-constructed, not returned by a call");
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, state_->limit, [&] { return state_->done; }))
    throw Error(explain(state_->what + " did not complete within " + std::to_string(state_->limit.count()) + " ms",
                        "a peer is stuck or the operation queue is blocked behind one",
                        "look for a stall report or a failure naming a rank in the logs"));
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Handle::done() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

// ---- executor ----
void Communicator::Impl::run_guarded(const std::function<void()>& op) {
  if (broken) std::rethrow_exception(broken);
  try {
    op();
  } catch (...) {
    broken = std::current_exception();  // links are in an unknown state now
    throw;
  }
}

void Communicator::Impl::drain_locked() {
  while (true) {
    std::pair<std::function<void()>, std::shared_ptr<Handle::State>> item;
    {
      std::lock_guard lock(queue_mu);
      if (queue.empty()) return;
      item = std::move(queue.front());
      queue.pop_front();
    }
    try {
      run_guarded(item.first);
      item.second->finish();
    } catch (...) {
      item.second->finish(std::current_exception());
    }
  }
}

Handle Communicator::Impl::submit(std::function<void()> op, const std::string& what) {
  auto state = std::make_shared<Handle::State>();
  state->what = what;
  state->limit = options.timeout * 4 + std::chrono::seconds(10);
  {
    std::lock_guard lock(queue_mu);
    queue.emplace_back(std::move(op), state);
  }
  queue_cv.notify_one();
  return Handle(state);
}

void Communicator::Impl::run_sync(const std::function<void()>& op) {
  std::lock_guard exec(exec_mu);
  drain_locked();  // earlier async calls first: order is part of the contract
  run_guarded(op);
}

// ---- bootstrap ----
Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  impl_->fusion_engine.reset();
  {
    std::lock_guard lock(impl_->queue_mu);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
  impl_->nccl.reset();
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, const Placement& where,
                                                   const Options& options) {
  if (where.size < 1 || where.rank < 0 || where.rank >= where.size)
    throw Error(explain("invalid placement: rank " + std::to_string(where.rank) + " of " + std::to_string(where.size),
                        "the rank must lie in [0, size)", "check SAKER_RANK/SAKER_WORLD_SIZE or the launcher"));
  // Every connection of the mesh proves the job key (auth.hpp); a lone rank has no
  // peers, so a key nobody else holds turns every stranger away.
  Options keyed = options;
  if (keyed.transit != Transit::off && keyed.job_key.empty() && where.size == 1)
    keyed.job_key = auth::JobKey::generate().raw();
  std::optional<auth::Context> mesh_auth = auth::context_for(keyed, auth::job_scope());  // before any traffic
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->options.job_key.clear();  // the key stays in the mesh's context, out of options()
  impl->where = where;
  impl->store = store;
  int port = 0;
  net::Fd listener = net::listen_on("0.0.0.0", 0, &port);
  std::ostringstream me;
  me << net::advertised_address() << ' ' << port << ' ' << where.host << ' ' << where.node << ' ' << getpid() << ' ' << machine_id();
  store->set("saker/rank/" + std::to_string(where.rank), me.str());
  store->sync(options.timeout);
  std::vector<PeerInfo> peers(static_cast<std::size_t>(where.size));
  for (int r = 0; r < where.size; ++r) {
    std::istringstream in(store->get("saker/rank/" + std::to_string(r), options.timeout));
    PeerInfo& p = peers[static_cast<std::size_t>(r)];
    if (!(in >> p.address >> p.port >> p.host >> p.node >> p.pid >> p.machine))
      throw Error(explain("malformed rendezvous entry for rank " + std::to_string(r) + " in " + store->describe(),
                          "another program wrote that key, or an older run's entries remain",
                          "use a fresh store (another port) for each job"));
  }
  impl->topo = Topology::from_peers(peers);
  const auto& local = impl->topo.members[static_cast<std::size_t>(impl->topo.node_of[static_cast<std::size_t>(where.rank)])];
  impl->local_rank = static_cast<int>(std::find(local.begin(), local.end(), where.rank) - local.begin());
  impl->mesh = std::make_unique<Mesh>(where.rank, std::move(peers), std::move(listener), options.timeout,
                                      std::move(mesh_auth));
  impl->timeline = std::make_unique<Timeline>(options.timeline_path, where.rank);
  impl->transport = Core::resolve(options.transport, impl->topo);
  impl->counters = std::make_unique<telemetry::CommCountersPublisher>(where.rank, where.size);
  // Each Core's shared-memory segment has a random name that travels over the mesh, not
  // the store, and is removed from /dev/shm once every local rank mapped it (shm.hpp).
  impl->user = std::make_unique<Core>(*impl->mesh, impl->topo, 0, options, impl->timeline.get());
  impl->fusion = std::make_unique<Core>(*impl->mesh, impl->topo, 1, options, impl->timeline.get());
  impl->user->publish_to(impl->counters.get());
  impl->fusion->publish_to(impl->counters.get());
  impl->user->barrier();  // every rank's communicator is complete
  Impl* raw = impl.get();
  impl->worker = std::thread([raw] {
    while (true) {
      {
        std::unique_lock lock(raw->queue_mu);
        raw->queue_cv.wait(lock, [&] { return raw->stopping || !raw->queue.empty(); });
        if (raw->queue.empty()) return;
      }
      std::lock_guard exec(raw->exec_mu);
      raw->drain_locked();
    }
  });
  std::unique_ptr<Communicator> c(new Communicator(std::move(impl)));
  if (options.fusion) c->impl_->fusion_engine = std::make_unique<FusionEngine>(*c->impl_);
  log::debug("comm: rank " + std::to_string(where.rank) + "/" + std::to_string(where.size) + " ready, transport " +
             name_of(c->impl_->transport) + ", " + std::to_string(c->node_count()) + " node(s)");
  return c;
}

int Communicator::rank() const { return impl_->where.rank; }
int Communicator::size() const { return impl_->where.size; }
int Communicator::local_rank() const { return impl_->local_rank; }
int Communicator::local_size() const {
  return static_cast<int>(impl_->topo.members[static_cast<std::size_t>(impl_->topo.node_of[static_cast<std::size_t>(rank())])].size());
}
int Communicator::node_count() const { return static_cast<int>(impl_->topo.members.size()); }
const std::string& Communicator::host_of(int r) const { return impl_->mesh->peer(r).host; }
Transport Communicator::transport() const { return impl_->transport; }
void Communicator::set_transport(Transport t) {
  std::lock_guard exec(impl_->exec_mu);
  impl_->transport = Core::resolve(t, impl_->topo);
}
const Options& Communicator::options() const { return impl_->options; }

// ---- collectives ----
static std::string op_args(std::size_t bytes, const char* extra) {
  return "{\"bytes\":" + std::to_string(bytes) + ",\"detail\":\"" + extra + "\"}";
}

Handle Communicator::allreduce_async(void* data, std::size_t count, DataType type, ReduceOp op) {
  Impl* i = impl_.get();
  i->timeline->instant("enqueue allreduce", "enqueue", kTidUser, op_args(count * size_of(type), name_of(type)));
  return i->submit([=] {
    Timeline::Scope s(i->timeline.get(), "allreduce", "op", kTidUser, op_args(count * size_of(type), name_of(type)));
    i->user->allreduce(data, count, type, op, i->transport);
  }, "allreduce");
}
Handle Communicator::broadcast_async(void* data, std::size_t bytes, int root) {
  Impl* i = impl_.get();
  return i->submit([=] { i->user->broadcast(data, bytes, root); }, "broadcast");
}
Handle Communicator::allgather_async(const void* send, void* recv, std::size_t bytes) {
  Impl* i = impl_.get();
  return i->submit([=] { i->user->allgather(send, recv, bytes, i->transport); }, "allgather");
}
Handle Communicator::barrier_async() {
  Impl* i = impl_.get();
  return i->submit([=] { i->user->barrier(); }, "barrier");
}

void Communicator::allreduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  Impl* i = impl_.get();
  i->run_sync([&] {
    Timeline::Scope s(i->timeline.get(), "allreduce", "op", kTidUser, op_args(count * size_of(type), name_of(type)));
    i->user->allreduce(data, count, type, op, i->transport);
  });
}
void Communicator::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= size())
    throw Error(explain("broadcast root " + std::to_string(root) + " is not a rank", "ranks are 0.." + std::to_string(size() - 1),
                        "pass a valid root"));
  impl_->run_sync([&] { impl_->user->broadcast(data, bytes, root); });
}
void Communicator::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->run_sync([&] { impl_->user->allgather(send, recv, bytes, impl_->transport); });
}
void Communicator::barrier() {
  impl_->run_sync([&] { impl_->user->barrier(); });
}

int Communicator::join() {
  if (!impl_->fusion_engine)
    throw Error(explain("join() needs the fusion thread", "Options::fusion is false",
                        "create the communicator with Options::fusion = true"));
  return impl_->fusion_engine->join();
}

Handle Communicator::enqueue_allreduce(const std::string& name, void* data, std::size_t count, DataType type,
                                       ReduceOp op, const std::vector<std::int64_t>& shape) {
  if (!impl_->fusion_engine)
    throw Error(explain("enqueue_allreduce('" + name + "') needs the fusion thread", "Options::fusion is false",
                        "create the communicator with Options::fusion = true"));
  if (op == ReduceOp::prod)
    throw Error(explain("enqueue_allreduce('" + name + "') with prod", "the fusion negotiation takes sum, min, max and avg",
                        "use allreduce() or allreduce_async() for a product (they run in submission order)"));
  return impl_->fusion_engine->enqueue(name, data, count, type, op, shape);
}

bool Communicator::nccl_available() { return NcclBackend::available(); }

// NCCL starts at first use. Where it cannot serve the job, every rank reaches the same
// refusal after plain exchanges (links intact): it is thrown outside run_guarded, so the
// communicator stays usable for host collectives, and kept, so later calls repeat it
// without another exchange.
void Communicator::Impl::with_nccl(const std::function<void(NcclBackend&)>& op) {
  run_sync([&] {
    if (!nccl && nccl_refused.empty()) {
      NcclPlan plan = NcclBackend::plan(*this);
      if (plan.refused.empty())
        nccl = std::make_unique<NcclBackend>(*this, plan.device);
      else
        nccl_refused = plan.refused;
    }
    if (nccl) op(*nccl);
  });
  if (!nccl) throw Error(nccl_refused);
}

void Communicator::allreduce_device(void* device_data, std::size_t count, DataType type, ReduceOp op, void* stream) {
  impl_->with_nccl([&](NcclBackend& n) { n.allreduce(device_data, count, type, op, stream); });
}

int Communicator::nccl_device() {
  int device = -1;
  impl_->with_nccl([&](NcclBackend& n) {
    n.make_current();  // run_sync runs on the calling thread
    device = n.device();
  });
  return device;
}

}  // namespace saker::comm
