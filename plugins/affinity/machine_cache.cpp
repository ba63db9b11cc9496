#include "plugins/affinity/machine_cache.hpp"

#include <hwloc.h>

#include <cstring>

namespace saker::affinity {
namespace {

constexpr char kMagic[8] = {'S', 'K', 'T', 'O', 'P', 'O', '\0', '2'};  // '2': format version

struct Writer {
  std::string out;
  void u64(std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void u32(std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out += s;
  }
  template <class T>
  void list(const std::vector<T>& v) {
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& x : v) u32(static_cast<std::uint32_t>(x));
  }
};

// Every read is bounds-checked: a truncated or foreign file sets `bad`, not a crash.
struct Reader {
  const std::string& in;
  std::size_t pos = 0;
  bool bad = false;
  bool take(void* dst, std::size_t n) {
    if (bad || in.size() - pos < n) return !(bad = true);
    std::memcpy(dst, in.data() + pos, n);
    pos += n;
    return true;
  }
  std::uint64_t u64() { std::uint64_t v = 0; take(&v, sizeof v); return v; }
  std::uint32_t u32() { std::uint32_t v = 0; take(&v, sizeof v); return v; }
  std::uint32_t count() {
    const std::uint32_t n = u32();
    if (n > in.size()) bad = true;  // no list is longer than the file
    return bad ? 0 : n;
  }
  std::string str() {
    std::string s(count(), '\0');
    if (!s.empty()) take(s.data(), s.size());
    return s;
  }
  template <class T>
  std::vector<T> list() {
    std::vector<T> v(count());
    for (auto& x : v) x = static_cast<T>(u32());
    return v;
  }
};

}  // namespace

std::uint64_t cache_key(const std::string& inputs) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  };
  // The hwloc API the build compiled against, not hwloc_get_api_version(): asking the
  // library would load it in every step's slurmstepd, where the plugin loads hwloc only on
  // a cache miss (plugins/spank/lazy_libs.cpp). A new hwloc API means a rebuild, and so a
  // new key.
  const unsigned hwloc = HWLOC_API_VERSION;
  mix(kMagic, sizeof kMagic);
  mix(&hwloc, sizeof hwloc);
  mix(inputs.data(), inputs.size());
  return h;
}

std::string encode_machine(const Machine& m, std::uint64_t key) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u64(key);
  w.str(m.hostname);
  w.str(m.gpu_order);
  w.list(m.allowed_pus);
  w.u32(static_cast<std::uint32_t>(m.cores.size()));
  for (const auto& c : m.cores) {
    w.u32(c.os_index);
    w.list(c.pus);
    w.u32(static_cast<std::uint32_t>(c.numa));
  }
  w.u32(static_cast<std::uint32_t>(m.numas.size()));
  for (const auto& n : m.numas) {
    w.u32(n.os_index);
    w.list(n.cores);
    w.list(n.pus);
  }
  w.u32(static_cast<std::uint32_t>(m.gpus.size()));
  for (const auto& g : m.gpus) {
    w.u32(g.index);
    w.str(g.pci_bus_id);
    w.str(g.os_names);
    w.u32(static_cast<std::uint32_t>(g.numa));
    w.u32(static_cast<std::uint32_t>(g.vendor));
    w.list(g.local_pus);
  }
  w.u32(static_cast<std::uint32_t>(m.nics.size()));
  for (const auto& n : m.nics) {
    w.str(n.pci_bus_id);
    w.str(n.hca);
    w.u32(n.port);
    w.str(n.netdev);
    w.u32(static_cast<std::uint32_t>(n.numa));
  }
  for (const auto& row : m.gpu_nic_hops) w.list(row);
  for (const auto& row : m.numa_nic_hops) w.list(row);
  return w.out;
}

std::optional<Machine> decode_machine(const std::string& bytes, std::uint64_t key) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  Reader r{bytes, sizeof kMagic};
  if (r.u64() != key) return std::nullopt;
  Machine m;
  m.hostname = r.str();
  m.gpu_order = r.str();
  m.allowed_pus = r.list<unsigned>();
  m.cores.resize(r.count());
  for (auto& c : m.cores) {
    c.os_index = r.u32();
    c.pus = r.list<unsigned>();
    c.numa = r.u32();
  }
  m.numas.resize(r.count());
  for (auto& n : m.numas) {
    n.os_index = r.u32();
    n.cores = r.list<std::size_t>();
    n.pus = r.list<unsigned>();
  }
  m.gpus.resize(r.count());
  for (auto& g : m.gpus) {
    g.index = r.u32();
    g.pci_bus_id = r.str();
    g.os_names = r.str();
    g.numa = r.u32();
    g.vendor = static_cast<GpuVendor>(r.u32());
    g.local_pus = r.list<unsigned>();
  }
  m.nics.resize(r.count());
  for (auto& n : m.nics) {
    n.pci_bus_id = r.str();
    n.hca = r.str();
    n.port = r.u32();
    n.netdev = r.str();
    n.numa = r.u32();
  }
  m.gpu_nic_hops.resize(m.gpus.size());
  for (auto& row : m.gpu_nic_hops) row = r.list<unsigned>();
  m.numa_nic_hops.resize(m.numas.size());
  for (auto& row : m.numa_nic_hops) row = r.list<unsigned>();
  if (r.bad || r.pos != bytes.size()) return std::nullopt;
  // Indexes must stay inside their lists, or the planner would read out of bounds.
  for (const auto& c : m.cores)
    if (c.numa >= m.numas.size()) return std::nullopt;
  for (const auto& n : m.numas)
    for (std::size_t c : n.cores)
      if (c >= m.cores.size()) return std::nullopt;
  for (std::size_t i = 0; i < m.gpus.size(); ++i)
    if (m.gpus[i].numa >= m.numas.size() || m.gpus[i].index != i) return std::nullopt;
  for (const auto& n : m.nics)
    if (n.numa >= m.numas.size()) return std::nullopt;
  for (const auto& row : m.gpu_nic_hops)
    if (row.size() != m.nics.size()) return std::nullopt;
  for (const auto& row : m.numa_nic_hops)
    if (row.size() != m.nics.size()) return std::nullopt;
  return m;
}

}  // namespace saker::affinity
