// NVML, loaded at run time: dlopen("libnvidia-ml.so.1") and the dozen functions used,
// declared here against NVML's stable C ABI (the build machines have no nvml.h, and a
// node without the driver must still run every CPU job).
//
// XID errors come from an NVML event set drained (without waiting) at each sample,
// where the driver supports events. Every NVML call is checked: NOT_SUPPORTED leaves that figure absent (a consumer GPU
// has no ECC, an old one no energy counter); any other error is counted and its text
// kept, and the other figures of that GPU are still read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace saker::telemetry {

struct GpuSample {
  unsigned index = 0;  // the node's GPU index (its /dev/nvidiaN minor number, as Slurm's gres)
  bool present = true; // false: no NVML device has this minor number
  std::optional<unsigned> util_percent;       // SM busy over the driver's last period
  std::optional<unsigned> mem_util_percent;   // memory controller busy
  std::optional<std::uint64_t> mem_used, mem_total;  // bytes
  std::optional<double> power_w;
  std::optional<std::uint64_t> energy_mj;     // since the driver loaded
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<std::uint64_t> throttle_reasons;  // nvmlClocksThrottleReason* bits
  std::optional<std::uint64_t> ecc_uncorrected;   // volatile count since the driver loaded
  unsigned xid_events = 0;                    // XID critical errors since the previous sample
  std::uint64_t last_xid = 0;                 // the last XID code (e.g. 79: fallen off the bus)
  unsigned errors = 0;                        // NVML calls that failed (not NOT_SUPPORTED)
  std::string last_error;                     // "nvmlDeviceGetPowerUsage: GPU is lost"
};

// Throttle reasons that mean the GPU was slowed down (not idle, not an application clock).
constexpr std::uint64_t kThrottleSlowdownMask = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;  // SwPower, HwSlowdown, Sw/HwThermal, PowerBrake
// "sw-power-cap,hw-thermal" for the bits set.
std::string describe_throttle_reasons(std::uint64_t bits);

class Nvml {
 public:
  // Loads `library` (the default name is what the driver installs) and initialises NVML.
  // nullptr with *why set when the library is absent, lacks a function, or nvmlInit fails.
  static std::unique_ptr<Nvml> open(std::string* why, const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Node GPU indexes (minor numbers) NVML can see.
  std::vector<unsigned> visible_indexes();
  // One sample of each GPU in `indexes`; a missing one comes back with present=false.
  std::vector<GpuSample> sample(const std::vector<unsigned>& indexes);

  struct Api;  // the resolved functions (nvml.cpp)

 private:
  Nvml() = default;
  void map_devices();
  void drain_xid_events(std::vector<GpuSample>& samples);
  void* handle_ = nullptr;
  void* events_ = nullptr;  // nvmlEventSet_t with XID errors registered (null: unsupported)
  std::unique_ptr<Api> api_;
  std::vector<std::pair<unsigned, void*>> devices_;  // minor number -> nvmlDevice_t
  bool mapped_ = false;
};

}  // namespace saker::telemetry
