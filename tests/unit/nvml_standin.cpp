// A stand-in libnvidia-ml.so.1, built for the tests only: it answers the NVML functions
// telemetry/nvml.cpp declares with values scripted in the file $SAKER_NVML_SCRIPT (else
// the file next to this library named like it plus ".script", for a sampler started by
// slurmstepd with a bare environment), read at nvmlInit_v2, so the real dlopen path can be driven through values, absent GPUs and
// NVML errors without a GPU. Script lines:
//   init RC                      nvmlInit_v2 returns RC (default 0)
//   count RC                     nvmlDeviceGetCount_v2 returns RC
//   gpu minor=M util=A,B,.. memutil=.. used=.. total=.. power_mw=.. energy_mj=.. temp=.. sm=.. throttle=.. ecc=..
//                                one device (index = order of the lines); a list gives the
//                                value of successive calls (the last one repeats)
//   fail FUNCTION RC             that function returns RC on every device
//   xid minor=M code=C           an XID critical error event of that GPU, delivered once
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Device {
  std::map<std::string, std::vector<unsigned long long>> values;
  std::map<std::string, std::size_t> calls;
  unsigned long long next(const std::string& key) {
    auto& v = values[key];
    if (v.empty()) return 0;
    std::size_t& i = calls[key];
    const unsigned long long out = v[std::min(i, v.size() - 1)];
    ++i;
    return out;
  }
  bool has(const std::string& key) const { return values.count(key) > 0; }
};

struct Script {
  int init_rc = 0, count_rc = 0;
  std::vector<Device> devices;
  std::map<std::string, int> fail;
  std::deque<std::pair<unsigned long long, unsigned long long>> xids;  // (minor, code)
};
struct EventData {
  void* device;
  unsigned long long type, data;
  unsigned int gi, ci;
};
Script g;

int failing(const char* fn) {
  auto it = g.fail.find(fn);
  return it == g.fail.end() ? 0 : it->second;
}

Device* dev(void* d) {
  auto i = reinterpret_cast<std::uintptr_t>(d);
  return i >= 1 && i <= g.devices.size() ? &g.devices[i - 1] : nullptr;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  g = Script{};
  std::string path;
  if (const char* env = std::getenv("SAKER_NVML_SCRIPT")) {
    path = env;
  } else {
    Dl_info self{};
    if (::dladdr(reinterpret_cast<void*>(&nvmlInit_v2), &self) != 0 && self.dli_fname != nullptr)
      path = std::string(self.dli_fname) + ".script";
  }
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string kind;
    w >> kind;
    if (kind == "init") w >> g.init_rc;
    else if (kind == "count") w >> g.count_rc;
    else if (kind == "fail") {
      std::string fn;
      int rc = 0;
      w >> fn >> rc;
      g.fail[fn] = rc;
    } else if (kind == "xid") {
      std::string m, c;
      w >> m >> c;
      g.xids.emplace_back(std::stoull(m.substr(m.find('=') + 1)), std::stoull(c.substr(c.find('=') + 1)));
    } else if (kind == "gpu") {
      Device d;
      for (std::string kv; w >> kv;) {
        auto eq = kv.find('=');
        std::istringstream list(kv.substr(eq + 1));
        for (std::string item; std::getline(list, item, ',');) d.values[kv.substr(0, eq)].push_back(std::stoull(item, nullptr, 0));
      }
      g.devices.push_back(d);
    }
  }
  return g.init_rc;
}
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 999: return "Unknown Error";
    default: return "stand-in error";
  }
}
int nvmlDeviceGetCount_v2(unsigned int* n) {
  if (g.count_rc) return g.count_rc;
  *n = static_cast<unsigned int>(g.devices.size());
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) {
  if (i >= g.devices.size()) return 2;
  *d = reinterpret_cast<void*>(static_cast<std::uintptr_t>(i + 1));
  return 0;
}

#define STANDIN_GET(fn, key, type, out)          \
  if (int rc = failing(#fn)) return rc;          \
  Device* d = dev(handle);                       \
  if (d == nullptr) return 2;                    \
  if (!d->has(key)) return 3; /* NOT_SUPPORTED */ \
  *(out) = static_cast<type>(d->next(key));      \
  return 0;

int nvmlDeviceGetMinorNumber(void* handle, unsigned int* m) { STANDIN_GET(nvmlDeviceGetMinorNumber, "minor", unsigned int, m) }
int nvmlDeviceGetUtilizationRates(void* handle, unsigned int* u) {
  if (int rc = failing("nvmlDeviceGetUtilizationRates")) return rc;
  Device* d = dev(handle);
  if (d == nullptr) return 2;
  if (!d->has("util")) return 3;
  u[0] = static_cast<unsigned int>(d->next("util"));
  u[1] = static_cast<unsigned int>(d->next("memutil"));
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* handle, unsigned long long* m) {
  if (int rc = failing("nvmlDeviceGetMemoryInfo")) return rc;
  Device* d = dev(handle);
  if (d == nullptr) return 2;
  if (!d->has("total")) return 3;
  m[0] = d->next("total");
  m[2] = d->next("used");
  m[1] = m[0] - m[2];
  return 0;
}
int nvmlDeviceGetPowerUsage(void* handle, unsigned int* mw) { STANDIN_GET(nvmlDeviceGetPowerUsage, "power_mw", unsigned int, mw) }
int nvmlDeviceGetTotalEnergyConsumption(void* handle, unsigned long long* mj) {
  STANDIN_GET(nvmlDeviceGetTotalEnergyConsumption, "energy_mj", unsigned long long, mj)
}
int nvmlDeviceGetTemperature(void* handle, int /*sensor*/, unsigned int* t) { STANDIN_GET(nvmlDeviceGetTemperature, "temp", unsigned int, t) }
int nvmlDeviceGetClockInfo(void* handle, int /*type*/, unsigned int* mhz) { STANDIN_GET(nvmlDeviceGetClockInfo, "sm", unsigned int, mhz) }
int nvmlDeviceGetCurrentClocksThrottleReasons(void* handle, unsigned long long* r) {
  STANDIN_GET(nvmlDeviceGetCurrentClocksThrottleReasons, "throttle", unsigned long long, r)
}
int nvmlDeviceGetTotalEccErrors(void* handle, int /*type*/, int /*counter*/, unsigned long long* n) {
  STANDIN_GET(nvmlDeviceGetTotalEccErrors, "ecc", unsigned long long, n)
}

int nvmlEventSetCreate(void** set) {
  if (int rc = failing("nvmlEventSetCreate")) return rc;
  *set = &g;
  return 0;
}
int nvmlDeviceRegisterEvents(void* handle, unsigned long long /*types*/, void* /*set*/) {
  if (int rc = failing("nvmlDeviceRegisterEvents")) return rc;
  return dev(handle) ? 0 : 2;
}
int nvmlEventSetWait_v2(void* /*set*/, EventData* e, unsigned int /*timeout_ms*/) {
  if (g.xids.empty()) return 10;  // NVML_ERROR_TIMEOUT
  const auto [minor, code] = g.xids.front();
  g.xids.pop_front();
  *e = EventData{};
  for (std::size_t i = 0; i < g.devices.size(); ++i)
    if (g.devices[i].has("minor") && g.devices[i].values["minor"][0] == minor) e->device = reinterpret_cast<void*>(i + 1);
  e->type = 0x8;
  e->data = code;
  return 0;
}
int nvmlEventSetFree(void* /*set*/) { return 0; }

}  // extern "C"
