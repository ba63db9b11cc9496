// NCCL for device buffers; the ncclUniqueId travels over the communicator's own ring.
// Built only with NCCL (SAKER_HAVE_NCCL); otherwise every entry point explains why not.
#pragma once

#include <cstddef>

#include "saker/comm.hpp"

namespace saker::comm {

class Core;

class NcclBackend {
 public:
  NcclBackend(Core& core, int rank, int size, int local_rank);
  ~NcclBackend();
  void allreduce(void* device_data, std::size_t count, DataType type, ReduceOp op, void* stream);
  static bool available();  // built with NCCL and a CUDA device is visible

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int size_;
};

}  // namespace saker::comm
