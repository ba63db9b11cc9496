// NCCL backend check: exits 77 (automake's SKIP) without a CUDA device; otherwise
// allreduces a device buffer through Communicator::allreduce_device and checks it.
#include <cstdio>
#include <vector>

#include "config.h"
#include "saker/comm.hpp"
#ifdef SAKER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int main() {
  using namespace saker::comm;
  if (!Communicator::nccl_available()) {
    std::puts("SKIP: no NCCL build or no CUDA device visible");
    return 77;
  }
#ifdef SAKER_HAVE_CUDA
  Options o;
  o.fusion = false;
  o.ignore_environment = true;
  auto c = Communicator::create(make_memory_store(), Placement{0, 1, "gpu-node", "gpu-host", 0}, o);
  std::vector<float> host(1 << 20, 2.5f);
  void* dev = nullptr;
  if (cudaMalloc(&dev, host.size() * 4) != cudaSuccess) return 1;
  cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  c->allreduce_device(dev, host.size(), DataType::f32, ReduceOp::sum, nullptr);
  cudaDeviceSynchronize();
  cudaMemcpy(host.data(), dev, host.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  bool ok = host.front() == 2.5f && host.back() == 2.5f;
  std::printf("NCCL allreduce on 1 rank: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
#else
  return 77;
#endif
}
