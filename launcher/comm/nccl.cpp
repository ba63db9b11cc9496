#include "launcher/comm/nccl.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "config.h"
#include "common/error.hpp"
#include "launcher/comm/core.hpp"
#include "launcher/comm/impl.hpp"

#ifdef SAKER_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace saker::comm {

std::string first_visible_device(const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return "";
  const std::string all(cuda_visible_devices);
  return all.substr(0, all.find(','));
}

bool own_gpu_first(const std::vector<std::string>& firsts) {
  std::set<std::string> seen;
  for (const std::string& f : firsts)
    if (f.empty() || !seen.insert(f).second) return false;
  return !firsts.empty();
}

int choose_cuda_device(int visible, int local_rank, int local_size, bool own_first, const std::string& host) {
  if (visible <= 0)
    throw Error(explain("NCCL needs a CUDA device on " + host, "none is visible to this process",
                        "request GPUs (--gres=gpu:N or --gpus-per-task=1) or use allreduce() on host memory"));
  if (own_first) return 0;
  if (local_size > visible)
    throw Error(explain(std::to_string(local_size) + " ranks on " + host + " share " + std::to_string(visible) +
                            " visible CUDA device(s)",
                        "NCCL needs a GPU of its own for every rank",
                        "start at most " + std::to_string(visible) + " rank(s) per node, or give each rank its own GPU "
                        "(--gpus-per-task=1, or Saker's SPANK plugin)"));
  return local_rank;
}

#ifdef SAKER_HAVE_NCCL

namespace {

void check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw Error(explain(std::string("NCCL ") + what + " failed", ncclGetErrorString(rc),
                        "set NCCL_DEBUG=INFO for details; check every rank has its own GPU"));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::f16: return ncclFloat16;
    case DataType::bf16: return ncclBfloat16;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::prod: return ncclProd;
  }
  return ncclSum;
}

}  // namespace

bool NcclBackend::available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

NcclPlan NcclBackend::plan(Communicator::Impl& c) {
  const int rank = c.where.rank, size = c.where.size;
  // What every rank sees travels first, so that all ranks decide alike (naming the rank
  // without a GPU) rather than some waiting in ncclCommInitRank for a peer that gave up.
  struct Seen {
    std::int32_t devices;
    char first[60];  // first entry of CUDA_VISIBLE_DEVICES (ids, UUIDs or MIG names fit)
  };
  Seen mine{};
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  mine.devices = devices;
  std::snprintf(mine.first, sizeof mine.first, "%s", first_visible_device(std::getenv("CUDA_VISIBLE_DEVICES")).c_str());
  std::vector<Seen> all(static_cast<std::size_t>(size));
  c.user->allgather(&mine, all.data(), sizeof(Seen));
  NcclPlan plan;
  for (int r = 0; r < size; ++r) {
    if (all[static_cast<std::size_t>(r)].devices <= 0) {
      plan.refused = explain("NCCL needs a CUDA device on every rank",
                             "rank " + std::to_string(r) + " on " + c.mesh->peer(r).host + " sees none",
                             "request GPUs for every rank (--gres=gpu:N or --gpus-per-task=1), or use allreduce() on "
                             "host memory");
      return plan;
    }
  }
  // Every rank works out every rank's device, so a node with too few GPUs fails all
  // ranks alike, not only its own.
  try {
    for (const std::vector<int>& node : c.topo.members) {
      std::vector<std::string> firsts;
      for (int r : node) {
        const Seen& s = all[static_cast<std::size_t>(r)];
        firsts.emplace_back(s.first, strnlen(s.first, sizeof s.first));
      }
      const bool own_first = own_gpu_first(firsts);
      for (std::size_t i = 0; i < node.size(); ++i) {
        const int r = node[i];
        const int d = choose_cuda_device(all[static_cast<std::size_t>(r)].devices, static_cast<int>(i),
                                         static_cast<int>(node.size()), own_first, c.mesh->peer(r).host);
        if (r == rank) plan.device = d;
      }
    }
  } catch (const Error& e) {
    plan.refused = e.what();
  }
  return plan;
}

NcclBackend::NcclBackend(Communicator::Impl& c, int device) : device_(device) {
  const int rank = c.where.rank, size = c.where.size;
  make_current();
  // The unique id travels over our own ring: no second rendezvous, and never through a
  // store. Our links proved the job key (auth.hpp) and shared memory is this user's
  // 0600 segment, so only the job's ranks learn it (with transit encrypt it is also
  // sealed between nodes). NCCL's own traffic gets none of this: its bootstrap and data
  // connections are neither authenticated nor encrypted, so anyone on the network who
  // learns or guesses its ports can connect to them and read or alter tensors (see
  // saker-comm(3), AUTHENTICATION). Keeping the id secret only makes that harder.
  ncclUniqueId id{};
  if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  c.user->broadcast(&id, sizeof id, 0);
  ncclComm_t nc = nullptr;
  check(ncclCommInitRank(&nc, size, id, rank), "ncclCommInitRank");
  comm_ = nc;
}

NcclBackend::~NcclBackend() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclBackend::make_current() const {
  if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    throw Error(explain("cudaSetDevice(" + std::to_string(device_) + ") failed", cudaGetErrorString(e),
                        "check the GPU with nvidia-smi"));
}

void NcclBackend::allreduce(void* device_data, std::size_t count, DataType type, ReduceOp op, void* stream) {
  check(ncclAllReduce(device_data, device_data, count, nccl_type(type), nccl_op(op), static_cast<ncclComm_t>(comm_),
                      static_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
}

#else

static std::string no_nccl_reason() {
  return explain("NCCL (allreduce_device, nccl_device) is not available", "libsaker_comm was built without NCCL",
                 "rebuild with CUDA and NCCL installed (configure --with-nccl)");
}
static Error no_nccl() { return Error(no_nccl_reason()); }

bool NcclBackend::available() { return false; }
NcclPlan NcclBackend::plan(Communicator::Impl&) { return NcclPlan{-1, no_nccl_reason()}; }
NcclBackend::NcclBackend(Communicator::Impl&, int) { throw no_nccl(); }
NcclBackend::~NcclBackend() = default;
void NcclBackend::make_current() const { throw no_nccl(); }
void NcclBackend::allreduce(void*, std::size_t, DataType, ReduceOp, void*) { throw no_nccl(); }

#endif

}  // namespace saker::comm
