// libsaker_comm: collective communication for data-parallel training under Slurm.
//
// One call bootstraps a communicator from the environment (PMI2 under `srun --mpi=pmi2`,
// a TCP store on the step's first node under plain `srun`, an explicit host:port
// elsewhere); collectives then run over a pipelined TCP ring, a /dev/shm path between
// ranks of one node, a hierarchical mix of both, or NCCL for device buffers.
//
// Contract (as in MPI): every rank issues the same collectives in the same order.
// Named tensors given to enqueue_allreduce() are the exception: they may be submitted
// in any order; a background thread matches them by name across ranks, fuses them and
// reports (then fails) names some rank never submits.
//
// No call blocks forever: every wait is bounded by Options::timeout, and a failure
// names the rank and host that died or did not answer.
//
// Environment read by Communicator::from_environment (first match wins):
//   1. PMI2 (srun --mpi=pmi2): PMI_FD must be set (PMI2_Init "succeeds" without it,
//      then every call fails), rank/size from PMI2_Init.
//   2. Slurm without PMI2: SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), SLURM_JOB_ID,
//      SLURM_STEP_ID, SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS). The
//      TCP store runs in the rank with SLURM_PROCID 0's node's first task
//      (SLURM_NODEID=0, SLURM_LOCALID=0) on port 20000 + (job*64 + step) % 12000 (below the ephemeral range),
//      or SAKER_STORE_PORT when set.
//   3. Explicit: SAKER_STORE=host:port (else MASTER_ADDR + MASTER_PORT), rank from
//      SAKER_RANK (else RANK), size from SAKER_WORLD_SIZE (else WORLD_SIZE).
//      Rank 0 serves the store on that port unless SAKER_STORE_EXTERNAL=1 says
//      another process (e.g. saker-run) already serves it (see TcpStoreServer).
//   Node identity (which ranks share /dev/shm): SAKER_NODE_ID, else SLURMD_NODENAME,
//   else the host name. local_rank()/local_size() are derived from node identity
//   (the position among ranks with the same node), so they agree with /dev/shm use.
//   Address published for peers: SAKER_COMM_ADDR, else the host name's address.
//   Job key (every connection proves it; saker-comm(3), AUTHENTICATION): SAKER_JOB_KEY
//   (64 hex digits), else SAKER_JOB_KEY_FILE (0600, in a 0700 directory, both the
//   user's), else under PMI2 one rank 0 makes and shares through the KVS; without one,
//   more than one rank refuses to start unless SAKER_COMM_TRANSIT=off.
//   Tuning (override Options): SAKER_COMM_TIMEOUT (seconds), SAKER_COMM_TRANSPORT
//   (auto|ring|shm|hierarchical), SAKER_COMM_CHUNK_BYTES, SAKER_FUSION_BYTES,
//   SAKER_FUSION_CYCLE_MS, SAKER_STALL_WARNING_S, SAKER_STALL_ABORT_S,
//   SAKER_TIMELINE (Chrome trace path; "%r" is replaced by the rank, otherwise only
//   rank 0 writes).
//
// Linking inside Saker: launcher/libsaker_comm_core.la common/libsaker_common.la
// $(COMM_LIBS) $(SLURM_LDFLAGS) $(SLURM_LIBS); outside: -lsaker_comm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace saker::comm {

enum class DataType { f32, f64, f16, bf16, i32, i64 };
// prod multiplies (integers wrap on overflow). The fusion negotiation (enqueue_allreduce)
// takes sum, min, max and avg only; prod runs through allreduce() and reduce_scatter().
enum class ReduceOp { sum, min, max, avg, prod };
// automatic: shm when every rank shares one node, ring when every rank is on its own
// node, hierarchical (shm in the node + ring among node leaders) otherwise.
enum class Transport { automatic, ring, shm, hierarchical };
// What protects the bytes between ranks (saker-comm(3), TRUST MODEL). Every
// connection proves the job's key both ways before any other byte is believed;
// encrypt also seals every byte between nodes with AES-256-GCM. off is for
// benchmarks only: it drops the proof, and anyone who can reach a port can join.
enum class Transit { auth, encrypt, off };

std::size_t size_of(DataType t);
const char* name_of(DataType t);
const char* name_of(ReduceOp op);
const char* name_of(Transport t);
const char* name_of(Transit t);

struct Options {
  // Longest any single wait (store, peer, handle) may take before failing.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  Transport transport = Transport::automatic;
  // Ring pipeline granularity: a slice is sent in chunks of this size so that
  // sending, receiving and reducing overlap.
  std::size_t chunk_bytes = 256 * 1024;
  // Tensor fusion: buffer size and how often the background thread negotiates while
  // tensors are pending (when no rank has any, the pause doubles up to 50 ms, and a
  // local enqueue ends it at once).
  bool fusion = true;  // start the background thread (needed by enqueue_allreduce)
  std::size_t fusion_bytes = 64u << 20;
  std::chrono::milliseconds fusion_cycle{2};
  // A tensor submitted by some ranks and not others is reported after
  // stall_warning, and its handles fail after stall_abort (zero: never).
  std::chrono::milliseconds stall_warning{std::chrono::seconds(60)};
  std::chrono::milliseconds stall_abort{std::chrono::seconds(0)};
  std::string timeline_path;  // Chrome trace; empty: off
  // SAKER_COMM_TRANSIT=auth|encrypt|off (saker-run --transit).
  Transit transit = Transit::auth;
  // The job key, 32 raw bytes, that every connection proves (saker-comm(3),
  // AUTHENTICATION). Empty: from_environment reads SAKER_JOB_KEY or SAKER_JOB_KEY_FILE
  // (or shares one over PMI2); create() refuses to join more than one rank without it
  // unless transit is off. Never logged.
  std::string job_key;
  // Overrides applied by from_environment() after reading SAKER_* tuning variables:
  // leave false to let the environment win over the values above.
  bool ignore_environment = false;
};

// A key-value rendezvous. get() blocks until the key exists or the timeout passes
// (then throws saker::Error naming the key). sync() is a collective that makes every
// set() so far visible (PMI2's fence); a no-op for stores where get() waits.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual void sync(std::chrono::milliseconds /*timeout*/) {}
  virtual std::string describe() const = 0;  // for error messages
};

// In-process store for ranks that are threads (unit tests).
std::shared_ptr<Store> make_memory_store();
// Client of a TCP store served by TcpStoreServer (retries connecting until
// options.timeout). Client and server prove options.job_key to each other before any
// request (no handshake under Transit::off); a server that fails is named, never used.
std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, const Options& options);
// Slurm's PMI2 KVS (only under srun --mpi=pmi2; throws otherwise).
std::shared_ptr<Store> make_pmi2_store(int* rank, int* size);

// Serves the TCP store protocol on a background thread until destroyed. Clients
// that fail the job-key handshake (options.job_key, options.transit) are dropped and
// logged; the others never notice.
class TcpStoreServer {
 public:
  TcpStoreServer(int port, const Options& options, const std::string& bind_address = "0.0.0.0");
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Completion of an asynchronous call. wait() rethrows the operation's error; it is
// bounded by the communicator's timeout.
class Handle {
 public:
  struct State;
  Handle() = default;
  explicit Handle(std::shared_ptr<State> s) : state_(std::move(s)) {}
  void wait();
  bool done() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// Where this rank sits, as the bootstrap found it.
struct Placement {
  int rank = 0;
  int size = 1;
  std::string node;  // node identity (ranks with equal node share /dev/shm)
  std::string host;  // host name reported in errors
  int local_rank = -1;  // -1: derive from node identity
};

class Communicator {
 public:
  // Bootstraps from the environment (see the top of this file).
  static std::unique_ptr<Communicator> from_environment(const Options& options = {});
  // Bootstraps over a given store (unit tests, custom launchers). Collective.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, const Placement& where,
                                              const Options& options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int node_count() const;
  const std::string& host_of(int rank) const;
  // The transport allreduce uses (after automatic choice); set_transport overrides.
  Transport transport() const;
  void set_transport(Transport t);
  const Options& options() const;

  // Synchronous collectives on host memory; in place where one buffer is given.
  void allreduce(void* data, std::size_t count, DataType type, ReduceOp op = ReduceOp::sum);
  void broadcast(void* data, std::size_t bytes, int root);
  // recv holds size() * bytes; rank r's send lands at recv + r * bytes.
  void allgather(const void* send, void* recv, std::size_t bytes);
  void barrier();

  // Horovod's alltoall (MPI_Alltoallv): this rank sends send_counts[j] rows to rank j,
  // taken from send in rank order, and receives from every rank what that rank sends
  // here, in rank order. A row is row_elems elements of type; counts may differ between
  // ranks and pairs (uneven splits). Before any data moves, the ranks allgather each
  // one's type, row size and counts (one small round), so that every rank knows what it
  // receives and a type or row size that differs, or an expected count that does not
  // match what is sent, makes every rank throw the same saker::Error naming `name`, the
  // ranks and their values (the communicator stays usable). recv_buffer is given the
  // rows this rank receives from each rank and returns where they go (their sum times
  // row_elems elements; may be null when that is zero). Returns those counts.
  // Over TCP links between every pair (ring, shm and hierarchical transports alike),
  // sealed under Transit::encrypt.
  using RecvBuffer = std::function<void*(const std::vector<std::size_t>& recv_counts)>;
  std::vector<std::size_t> alltoallv(const void* send, const std::vector<std::size_t>& send_counts,
                                     std::size_t row_elems, DataType type, const RecvBuffer& recv_buffer,
                                     const std::string& name = "");
  // The same with the receive side known: recv_counts[j] rows arrive from rank j into
  // recv (a mismatch with what rank j sends throws on every rank, as above).
  void alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                 const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                 const std::string& name = "");
  // MPI_Reduce_scatter: send holds sum(counts) elements on every rank; rank r receives
  // in recv the op over all ranks of elements [counts[0] + ... + counts[r-1], + counts[r]).
  // send is left as it was. A type, op or counts that differ between ranks make every
  // rank throw the same saker::Error naming `name` and each rank's value before any data
  // moves. A pipelined ring over TCP (sealed under Transit::encrypt): each rank sends
  // and receives (size()-1)/size() of the buffer, as the first half of a ring allreduce.
  void reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType type,
                      ReduceOp op = ReduceOp::sum, const std::string& name = "");

  // Asynchronous forms: the buffers must stay valid until the handle completes.
  // Calls run in submission order on a background thread.
  Handle allreduce_async(void* data, std::size_t count, DataType type, ReduceOp op = ReduceOp::sum);
  Handle broadcast_async(void* data, std::size_t bytes, int root);
  Handle allgather_async(const void* send, void* recv, std::size_t bytes);
  Handle barrier_async();
  // send and recv must stay valid until the handle completes (the counts are copied).
  Handle alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                         const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                         const std::string& name = "");
  Handle reduce_scatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType type,
                              ReduceOp op = ReduceOp::sum, const std::string& name = "");

  // Tensor fusion: named tensors, any submission order across ranks (see top). The ranks
  // compare each name's type, op, count and shape (when given: its dimensions, whose
  // product must be count) before it is reduced; where they differ, every rank that
  // submitted it gets the same saker::Error naming the tensor and each rank's value.
  Handle enqueue_allreduce(const std::string& name, void* data, std::size_t count, DataType type,
                           ReduceOp op = ReduceOp::sum, const std::vector<std::int64_t>& shape = {});
  // Horovod's join, for ranks that ran out of data before the others: until every rank
  // has called join(), this rank stands in for each named tensor the others reduce,
  // contributing the op's identity (0 for sum and avg, so avg still divides by size();
  // the type's largest value for min, its lowest for max). Blocks until all ranks have
  // joined and returns the rank that joined last (the highest of those that joined in
  // the same negotiation round). Collective; may be called again for the next round.
  // Only named allreduces are stood in for: the ordered collectives above still need
  // every rank.
  int join();

  // NCCL for device buffers (throws when built without NCCL or without a GPU).
  // stream is a cudaStream_t; the call returns once the work is enqueued on it.
  static bool nccl_available();
  void allreduce_device(void* device_data, std::size_t count, DataType type, ReduceOp op,
                        void* cuda_stream);
  // Sets NCCL up now (collective; allreduce_device does it on first use otherwise) and
  // returns the CUDA device this rank drives, made current on the calling thread: device
  // 0 when the ranks of its node each see a different device first in
  // CUDA_VISIBLE_DEVICES (Saker's SPANK plugin lists a rank's own GPU first,
  // --gpus-per-task shows only its own), else device local_rank(). Throws, naming the
  // rank and host, when some rank sees no device or ranks would share one; that refusal
  // reaches every rank alike and leaves the communicator usable for host collectives
  // (later NCCL calls repeat it without another exchange).
  int nccl_device();

  struct Impl;

 private:
  friend class OrderedReduce;  // its chain of nodes (ordered_nodes.hpp) runs on the mesh itself
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads the Options the environment asks for (SAKER_COMM_*, SAKER_FUSION_*,
// SAKER_STALL_*, SAKER_TIMELINE) on top of base.
Options options_from_environment(Options base = {});

}  // namespace saker::comm
