// NCCL for device buffers; the ncclUniqueId travels over the communicator's own ring.
// Built only with NCCL (SAKER_HAVE_NCCL); otherwise every entry point explains why not.
// The device rule below is plain C++ in every build, so it is tested without a GPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "saker/comm.hpp"

namespace saker::comm {

// The first entry of a CUDA_VISIBLE_DEVICES value ("3,0,1,2" -> "3"); "" when unset.
std::string first_visible_device(const char* cuda_visible_devices);

// True when the ranks of one node (their first visible devices, in local-rank order)
// each see a different device first: Saker's SPANK plugin lists a rank's own GPU first
// and --gpus-per-task shows each rank only its own, so device 0 is that rank's GPU.
bool own_gpu_first(const std::vector<std::string>& first_visible_of_node);

// The CUDA device local rank `local_rank` of `local_size` drives: 0 under own_first,
// else the node's ranks share one list and rank r takes device r. Throws saker::Error
// (naming the host) when no device is visible or two ranks would share one, which
// NCCL refuses.
int choose_cuda_device(int visible_devices, int local_rank, int local_size, bool own_first, const std::string& host);

// Where NCCL can serve a job: this rank's device, or why it cannot (a rank without a GPU,
// ranks that would share one, a build without NCCL), the same reason on every rank.
struct NcclPlan {
  int device = -1;
  std::string refused;  // empty when NCCL can start
};

class NcclBackend {
 public:
  // Collective over the host ring: every rank's view of its GPUs, judged alike by all
  // ranks. Only plain exchanges, so a refusal leaves the communicator usable.
  static NcclPlan plan(Communicator::Impl& comm);
  // Collective: ncclCommInitRank on plan(comm).device (the unique id over the host ring).
  NcclBackend(Communicator::Impl& comm, int device);
  ~NcclBackend();
  void allreduce(void* device_data, std::size_t count, DataType type, ReduceOp op, void* stream);
  int device() const { return device_; }
  void make_current() const;  // cudaSetDevice(device()) on the calling thread
  static bool available();  // built with NCCL and a CUDA device is visible

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int device_ = -1;
};

}  // namespace saker::comm
