#include "launcher/comm/nccl.hpp"

#include "config.h"
#include "common/error.hpp"
#include "launcher/comm/core.hpp"

#ifdef SAKER_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace saker::comm {

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
  }
  return ncclSum;
}

}  // namespace

bool NcclBackend::available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

NcclBackend::NcclBackend(Core& core, int rank, int size, int local_rank) : size_(size) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw Error(explain("allreduce_device needs a CUDA device", "none is visible to this process",
                        "request GPUs (--gres=gpu:N) or use allreduce() on host memory"));
  if (cudaSetDevice(local_rank % devices) != cudaSuccess)
    throw Error("saker: cudaSetDevice(" + std::to_string(local_rank % devices) + ") failed");
  // The unique id travels over our own ring: no second rendezvous.
  ncclUniqueId id{};
  if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  core.broadcast(&id, sizeof id, 0);
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, size, id, rank), "ncclCommInitRank");
  comm_ = c;
}

NcclBackend::~NcclBackend() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclBackend::allreduce(void* device_data, std::size_t count, DataType type, ReduceOp op, void* stream) {
  check(ncclAllReduce(device_data, device_data, count, nccl_type(type), nccl_op(op), static_cast<ncclComm_t>(comm_),
                      static_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
}

#else

static Error no_nccl() {
  return Error(explain("allreduce_device is not available", "libsaker_comm was built without NCCL",
                       "rebuild with CUDA and NCCL installed (configure --with-nccl)"));
}

bool NcclBackend::available() { return false; }
NcclBackend::NcclBackend(Core&, int, int size, int) : size_(size) { throw no_nccl(); }
NcclBackend::~NcclBackend() = default;
void NcclBackend::allreduce(void*, std::size_t, DataType, ReduceOp, void*) { throw no_nccl(); }

#endif

}  // namespace saker::comm
