#include "telemetry/nvml.hpp"

#include <dlfcn.h>

namespace saker::telemetry {
namespace {

// NVML's C ABI, as published in nvml.h (stable since the _v2 entry points of 2012).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*count)(unsigned int*);
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*minor_number)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*throttle)(nvmlDevice_t, unsigned long long*);
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long*);
  // Optional (XID errors): null when the library lacks them.
  nvmlReturn_t (*event_set_create)(void**);
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, void*);
  nvmlReturn_t (*event_set_wait)(void*, nvmlEventData_t*, unsigned int);
  nvmlReturn_t (*event_set_free)(void*);
};

namespace {

template <typename F>
bool resolve(void* handle, const char* name, F*& out, std::string* missing) {
  out = reinterpret_cast<F*>(::dlsym(handle, name));
  if (out == nullptr && missing->empty()) *missing = name;
  return out != nullptr;
}

}  // namespace

std::string describe_throttle_reasons(std::uint64_t bits) {
  static const std::pair<std::uint64_t, const char*> names[] = {
      {0x1, "idle"},           {0x2, "application-clocks"}, {0x4, "sw-power-cap"},
      {0x8, "hw-slowdown"},    {0x10, "sync-boost"},        {0x20, "sw-thermal"},
      {0x40, "hw-thermal"},    {0x80, "power-brake"},       {0x100, "display-clocks"}};
  std::string out;
  for (const auto& [bit, name] : names)
    if (bits & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "none" : out;
}

std::unique_ptr<Nvml> Nvml::open(std::string* why, const std::string& library) {
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    *why = "cannot load " + library + " (" + (e ? e : "unknown error") +
           "): no NVIDIA driver on this node, so no GPU figures";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  resolve(h, "nvmlInit_v2", api->init, &missing);
  resolve(h, "nvmlShutdown", api->shutdown, &missing);
  resolve(h, "nvmlErrorString", api->error_string, &missing);
  resolve(h, "nvmlDeviceGetCount_v2", api->count, &missing);
  resolve(h, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index, &missing);
  resolve(h, "nvmlDeviceGetMinorNumber", api->minor_number, &missing);
  resolve(h, "nvmlDeviceGetUtilizationRates", api->utilization, &missing);
  resolve(h, "nvmlDeviceGetMemoryInfo", api->memory, &missing);
  resolve(h, "nvmlDeviceGetPowerUsage", api->power, &missing);
  resolve(h, "nvmlDeviceGetTotalEnergyConsumption", api->energy, &missing);
  resolve(h, "nvmlDeviceGetTemperature", api->temperature, &missing);
  resolve(h, "nvmlDeviceGetClockInfo", api->clock, &missing);
  resolve(h, "nvmlDeviceGetCurrentClocksThrottleReasons", api->throttle, &missing);
  resolve(h, "nvmlDeviceGetTotalEccErrors", api->ecc, &missing);
  std::string optional;
  resolve(h, "nvmlEventSetCreate", api->event_set_create, &optional);
  resolve(h, "nvmlDeviceRegisterEvents", api->register_events, &optional);
  resolve(h, "nvmlEventSetWait_v2", api->event_set_wait, &optional);
  resolve(h, "nvmlEventSetFree", api->event_set_free, &optional);
  if (!optional.empty()) api->event_set_create = nullptr;  // no XID figures, everything else
  if (!missing.empty()) {
    *why = library + " has no " + missing + ": it is not NVML, or a driver older than Saker supports (R450+)";
    ::dlclose(h);
    return nullptr;
  }
  if (const nvmlReturn_t rc = api->init(); rc != NVML_SUCCESS) {
    const char* text = api->error_string(rc);
    *why = "nvmlInit failed: " + std::string(text ? text : "error " + std::to_string(rc)) +
           " (is the NVIDIA driver loaded? nvidia-smi says)";
    ::dlclose(h);
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml);
  n->handle_ = h;
  n->api_ = std::move(api);
  return n;
}

Nvml::~Nvml() {
  if (events_) api_->event_set_free(events_);
  if (api_) api_->shutdown();
  if (handle_) ::dlclose(handle_);
}

void Nvml::map_devices() {
  if (mapped_) return;
  mapped_ = true;
  unsigned int n = 0;
  if (api_->count(&n) != NVML_SUCCESS) return;
  for (unsigned int i = 0; i < n && i < 1024; ++i) {
    nvmlDevice_t d = nullptr;
    unsigned int minor = 0;
    if (api_->handle_by_index(i, &d) != NVML_SUCCESS || api_->minor_number(d, &minor) != NVML_SUCCESS) continue;
    devices_.emplace_back(minor, d);
  }
  if (api_->event_set_create == nullptr || api_->event_set_create(&events_) != NVML_SUCCESS) {
    events_ = nullptr;
    return;
  }
  bool any = false;
  for (const auto& [minor, d] : devices_) any |= api_->register_events(d, nvmlEventTypeXidCriticalError, events_) == NVML_SUCCESS;
  if (!any) {
    api_->event_set_free(events_);
    events_ = nullptr;
  }
}

void Nvml::drain_xid_events(std::vector<GpuSample>& samples) {
  if (events_ == nullptr) return;
  for (int i = 0; i < 4096; ++i) {  // bounded: a storm of events must not stall the sampler
    nvmlEventData_t e{};
    if (api_->event_set_wait(events_, &e, 0) != NVML_SUCCESS) return;  // TIMEOUT: drained
    if (!(e.eventType & nvmlEventTypeXidCriticalError)) continue;
    for (const auto& [minor, d] : devices_)
      if (d == e.device)
        for (GpuSample& s : samples)
          if (s.index == minor) {
            ++s.xid_events;
            s.last_xid = e.eventData;
          }
  }
}

std::vector<unsigned> Nvml::visible_indexes() {
  map_devices();
  std::vector<unsigned> out;
  for (const auto& [minor, d] : devices_) out.push_back(minor);
  return out;
}

std::vector<GpuSample> Nvml::sample(const std::vector<unsigned>& indexes) {
  map_devices();
  std::vector<GpuSample> out;
  for (unsigned index : indexes) {
    GpuSample s;
    s.index = index;
    nvmlDevice_t d = nullptr;
    for (const auto& [minor, dev] : devices_)
      if (minor == index) d = dev;
    if (d == nullptr) {
      s.present = false;
      out.push_back(s);
      continue;
    }
    // check(): true on success; NOT_SUPPORTED is silence, other errors are counted.
    auto check = [&](nvmlReturn_t rc, const char* what) {
      if (rc == NVML_SUCCESS) return true;
      if (rc != NVML_ERROR_NOT_SUPPORTED) {
        ++s.errors;
        const char* text = api_->error_string(rc);
        s.last_error = std::string(what) + ": " + (text ? text : "error " + std::to_string(rc));
      }
      return false;
    };
    nvmlUtilization_t u{};
    if (check(api_->utilization(d, &u), "nvmlDeviceGetUtilizationRates") && u.gpu <= 100 && u.memory <= 100) {
      s.util_percent = u.gpu;
      s.mem_util_percent = u.memory;
    }
    nvmlMemory_t m{};
    if (check(api_->memory(d, &m), "nvmlDeviceGetMemoryInfo") && m.used <= m.total) {
      s.mem_used = m.used;
      s.mem_total = m.total;
    }
    unsigned int mw = 0;
    if (check(api_->power(d, &mw), "nvmlDeviceGetPowerUsage")) s.power_w = mw / 1000.0;
    unsigned long long mj = 0;
    if (check(api_->energy(d, &mj), "nvmlDeviceGetTotalEnergyConsumption")) s.energy_mj = mj;
    unsigned int t = 0;
    if (check(api_->temperature(d, NVML_TEMPERATURE_GPU, &t), "nvmlDeviceGetTemperature")) s.temperature_c = t;
    unsigned int mhz = 0;
    if (check(api_->clock(d, NVML_CLOCK_SM, &mhz), "nvmlDeviceGetClockInfo")) s.sm_clock_mhz = mhz;
    unsigned long long reasons = 0;
    if (check(api_->throttle(d, &reasons), "nvmlDeviceGetCurrentClocksThrottleReasons")) s.throttle_reasons = reasons;
    unsigned long long ecc = 0;
    if (check(api_->ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc), "nvmlDeviceGetTotalEccErrors"))
      s.ecc_uncorrected = ecc;
    out.push_back(s);
  }
  drain_xid_events(out);
  return out;
}

}  // namespace saker::telemetry
