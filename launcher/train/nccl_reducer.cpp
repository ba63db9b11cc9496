#include "launcher/train/nccl_reducer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "saker/comm.hpp"

namespace saker::train {
namespace {

std::string where(const comm::Communicator& c) {
  return "rank " + std::to_string(c.rank()) + " (" + c.host_of(c.rank()) + ")";
}

void cuda_check(cudaError_t e, const std::string& what, const comm::Communicator& c) {
  if (e != cudaSuccess)
    throw Error(explain(what + " on " + where(c) + " failed", cudaGetErrorString(e),
                        "check the GPU with nvidia-smi; NCCL_DEBUG=INFO shows NCCL's view"));
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

NcclReducer::NcclReducer(std::unique_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {
  device_ = comm_->nccl_device();  // collective; makes the device current on this thread
  char pci[32] = {};
  if (cudaDeviceGetPCIBusId(pci, sizeof pci, device_) == cudaSuccess) pci_ = pci;
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", *comm_);
  stream_ = s;
}

NcclReducer::~NcclReducer() {
  if (stuck_) {
    // A kernel that never finishes makes cudaFree, cudaStreamDestroy and
    // ncclCommDestroy wait forever: leave all of it to the process's exit.
    (void)comm_.release();
    return;
  }
  cudaFree(device_buf_);
  cudaFreeHost(pinned_buf_);
  if (stream_ != nullptr) cudaStreamDestroy(as_stream(stream_));
}

int NcclReducer::rank() const { return comm_->rank(); }

void NcclReducer::sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) {
  logical_.sum(*comm_, logical, parts, count, out);
}
int NcclReducer::size() const { return comm_->size(); }

std::string NcclReducer::describe() const {
  return "GPU " + std::to_string(device_) + (pci_.empty() ? "" : " (PCI " + pci_ + ")");
}

void NcclReducer::reserve(std::size_t count) {
  if (count <= capacity_) return;
  cuda_check(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize", *comm_);
  cudaFree(device_buf_);
  cudaFreeHost(pinned_buf_);
  device_buf_ = pinned_buf_ = nullptr;
  capacity_ = 0;
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&device_buf_), count * sizeof(float)),
             "cudaMalloc of " + std::to_string(count * sizeof(float)) + " bytes", *comm_);
  // Pinned, so that the copy back is truly asynchronous and the wait below stays
  // bounded (a copy into pageable memory would block in the CUDA runtime).
  cuda_check(cudaMallocHost(reinterpret_cast<void**>(&pinned_buf_), count * sizeof(float)),
             "cudaMallocHost of " + std::to_string(count * sizeof(float)) + " bytes", *comm_);
  capacity_ = count;
}

void NcclReducer::allreduce_sum(std::span<float> data) {
  SAKER_ASSERT(!stuck_, "no allreduce after NCCL got stuck (the error was thrown)");
  if (data.empty()) return;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")", *comm_);
  reserve(data.size());
  const std::size_t bytes = data.size_bytes();
  std::memcpy(pinned_buf_, data.data(), bytes);
  cuda_check(cudaMemcpyAsync(device_buf_, pinned_buf_, bytes, cudaMemcpyHostToDevice, as_stream(stream_)),
             "copying the gradients to the GPU", *comm_);
  comm_->allreduce_device(device_buf_, data.size(), comm::DataType::f32, comm::ReduceOp::sum, stream_);
  cuda_check(cudaMemcpyAsync(pinned_buf_, device_buf_, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)),
             "copying the summed gradients back", *comm_);
  wait_for_stream(data.size());
  std::memcpy(data.data(), pinned_buf_, bytes);
}

void NcclReducer::wait_for_stream(std::size_t count) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto limit = comm_->options().timeout;
  std::chrono::microseconds pause{0};
  while (true) {
    const cudaError_t e = cudaStreamQuery(as_stream(stream_));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda_check(e, "the gradient allreduce's CUDA stream", *comm_);
    const auto waited = Clock::now() - start;
    if (waited > limit) break;
    // A small step's allreduce takes microseconds: spin briefly, then back off to
    // 200 us naps so that a long wait does not burn a core.
    if (waited < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      pause = std::min(std::max(pause * 2, std::chrono::microseconds(10)), std::chrono::microseconds(200));
      std::this_thread::sleep_for(pause);
    }
  }
  stuck_ = true;
  // NCCL cannot say which peer it waits for; saker's host ring can: a rank that died
  // or hangs fails this barrier by name within the communicator's timeout.
  std::string why;
  try {
    comm_->barrier();
    why = "every rank still answers on saker's host ring, so NCCL itself is stuck";
  } catch (const std::exception& e) {
    why = e.what();
  }
  throw Error(explain("NCCL allreduce of " + std::to_string(count) + " floats on " + where(*comm_) +
                          " did not complete within " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) + " s",
                      why, "NCCL_DEBUG=INFO shows what NCCL waits for; saker-run restarts the step from the newest "
                           "checkpoint"));
}

}  // namespace saker::train
