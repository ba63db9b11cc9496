#include "launcher/train/device.hpp"

#include <sys/stat.h>

#include <cstdlib>

#include "config.h"

#ifdef SAKER_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace saker::train {

Device parse_device(const std::string& text) {
  if (text == "auto") return Device::automatic;
  if (text == "cpu") return Device::cpu;
  if (text == "gpu") return Device::gpu;
  throw Error(explain("--device '" + text + "'", "saker-train knows auto, cpu and gpu",
                      "pass --device auto (NCCL on the GPU when every rank has one), cpu or gpu"));
}

const char* name_of(Device d) {
  switch (d) {
    case Device::automatic: return "auto";
    case Device::cpu: return "cpu";
    case Device::gpu: return "gpu";
  }
  return "?";
}

GpuProbe interpret_cuda_probe(bool cuda_ok, int count, const std::string& cuda_error, bool driver_present) {
  GpuProbe p;
  p.built = true;
  if (cuda_ok && count > 0) {
    p.usable = true;
    return p;
  }
  if (!driver_present) {
    p.why_not = "no NVIDIA GPU on this machine";
    return p;
  }
  // The CUDA runtime's own words say why (a driver too old, a bad CUDA_VISIBLE_DEVICES);
  // Slurm's fake GPUs, for one, end up here.
  p.why_not = "no CUDA device visible: ";
  p.why_not += cuda_ok ? "cudaGetDeviceCount found 0" : "cudaGetDeviceCount: " + cuda_error;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) p.why_not += std::string(", CUDA_VISIBLE_DEVICES=") + visible;
  return p;
}

bool nvidia_driver_present() {
  struct stat st {};
  return ::stat("/proc/driver/nvidia", &st) == 0 || ::stat("/dev/nvidiactl", &st) == 0;
}

GpuProbe probe_gpu() {
#ifdef SAKER_HAVE_NCCL
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  return interpret_cuda_probe(e == cudaSuccess, n, e == cudaSuccess ? "" : cudaGetErrorString(e), nvidia_driver_present());
#else
  GpuProbe p;
  p.why_not = "this saker-train was built without NCCL";
  return p;
#endif
}

GpuProbe probe_gpu_for(Device wanted) {
  if (wanted != Device::cpu) return probe_gpu();
  GpuProbe p;
#ifdef SAKER_HAVE_NCCL
  p.built = true;
#endif
  p.why_not = "--device cpu";
  return p;
}

DeviceDecision decide_device(Device wanted, const std::vector<GpuProbe>& ranks, const std::vector<std::string>& hosts) {
  SAKER_ASSERT(!ranks.empty() && ranks.size() == hosts.size(), "one probe and one host per rank");
  if (wanted == Device::cpu) return {false, "--device cpu"};
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].usable) continue;
    const std::string who = ranks.size() == 1 ? "" : "rank " + std::to_string(r) + " on " + hosts[r] + ": ";
    if (wanted == Device::automatic) return {false, who + ranks[r].why_not};
    throw DeviceRefused(explain("--device gpu: " + (ranks.size() == 1 ? std::string("this saker-train") : "rank " + std::to_string(r) +
                                                                  " on " + hosts[r]) + " cannot allreduce with NCCL on a GPU",
                        ranks[r].why_not,
                        ranks[r].built ? "give every rank a GPU (sbatch --gpus-per-task=1, or --gres=gpu:N with at most "
                                         "N ranks per node), or pass --device auto or cpu to use saker's host ring"
                                       : "rebuild Saker with CUDA and NCCL (configure --with-nccl), or pass --device auto "
                                         "or cpu to use saker's host ring"));
  }
  return {true, wanted == Device::gpu ? "--device gpu" : "built with NCCL and every rank sees a CUDA device"};
}

}  // namespace saker::train
