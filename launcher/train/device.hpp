// Where saker-train sums its gradients (--device auto|cpu|gpu) and the rule that picks
// the path. The rule is one pure function of what EVERY rank found, so all ranks take
// the same path (a rank in NCCL and another on the host ring would never meet), and it
// is tested without a GPU.
#pragma once

#include <string>
#include <vector>

#include "common/error.hpp"

namespace saker::train {

enum class Device { automatic, cpu, gpu };

// "auto", "cpu" or "gpu"; throws saker::Error naming the accepted words.
Device parse_device(const std::string& text);
const char* name_of(Device d);

// What one rank found out about its own GPU path.
struct GpuProbe {
  bool built = false;   // this saker-train was built with NCCL
  bool usable = false;  // built with NCCL and at least one CUDA device visible
  std::string why_not;  // when not usable, e.g. "no CUDA device visible (cudaGetDeviceCount: ...)"
};

// This process: asks the CUDA runtime in a build with NCCL; otherwise says the build
// has no NCCL. Never throws.
GpuProbe probe_gpu();

// What --device needs: --device cpu never asks CUDA anything (no probe, no CUDA
// message); auto and gpu call probe_gpu().
GpuProbe probe_gpu_for(Device wanted);

// What the CUDA runtime's answer means (built with NCCL). On a machine without the NVIDIA
// kernel driver (driver_present false: no /proc/driver/nvidia, no /dev/nvidiactl) nothing
// is wrong, so the reason is plain words ("no NVIDIA GPU on this machine") and carries no
// CUDA error text (a CPU-only site must not read "CUDA driver version is insufficient" on
// every run). With the driver there, a failing runtime is worth reporting: the CUDA
// runtime's own words are kept.
GpuProbe interpret_cuda_probe(bool cuda_ok, int count, const std::string& cuda_error, bool driver_present);

// Whether this machine has the NVIDIA kernel driver loaded.
bool nvidia_driver_present();

// --device gpu where some rank has no GPU path: every rank throws it alike, and a
// restart would fail the same way (saker-train exits 78, which saker-run does not retry).
class DeviceRefused : public Error {
 public:
  using Error::Error;
};

struct DeviceDecision {
  bool gpu = false;    // NCCL on the GPU; otherwise saker's host ring
  std::string reason;  // why this path, for the start-up log line
};

// ranks[r] is rank r's probe, hosts[r] its host name.
//   automatic: the GPU when every rank can take it, else the host ring (the reason names
//              the first rank that cannot, with its host, unless there is one rank);
//   cpu:       the host ring;
//   gpu:       the GPU, or DeviceRefused naming that rank, its host, why and the fix.
DeviceDecision decide_device(Device wanted, const std::vector<GpuProbe>& ranks, const std::vector<std::string>& hosts);

}  // namespace saker::train
