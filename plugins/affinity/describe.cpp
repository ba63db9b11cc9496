#include "plugins/affinity/describe.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>

namespace saker::affinity {
namespace {

constexpr unsigned kNvidia = 0x10de, kAmd = 0x1002;

IndexList bitmap_to_list(hwloc_const_bitmap_t set) {
  IndexList out;
  if (set == nullptr) return out;
  unsigned i = 0;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(i); }
  hwloc_bitmap_foreach_end();
  return out;
}

std::string bus_id(hwloc_obj_t pci) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return buf;
}

unsigned class_of(hwloc_obj_t pci) { return pci->attr->pcidev.class_id; }
unsigned vendor_of(hwloc_obj_t pci) { return pci->attr->pcidev.vendor_id; }

bool has_prefix(const char* name, const char* prefix) {
  return name != nullptr && std::strncmp(name, prefix, std::strlen(prefix)) == 0;
}

// The compute device hwloc found on a PCI device, as Slurm's gres sees it: NVML or
// CUDA for NVIDIA, RSMI for AMD. OpenCL and display (cardN) devices do not count:
// an OpenCL-only card is not a device Slurm hands out as a GPU.
struct ComputeName {
  int rank = 0;        // 0 nvml, 1 cuda, 2 rsmi: which numbering this index belongs to
  unsigned index = 0;  // the N of nvmlN / cudaN / rsmiN
};

std::optional<ComputeName> compute_name(hwloc_obj_t pci) {
  static const char* const kPrefixes[] = {"nvml", "cuda", "rsmi"};
  std::optional<ComputeName> best;
  for (hwloc_obj_t o = pci->io_first_child; o != nullptr; o = o->next_sibling) {
    if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == nullptr) continue;
    for (int r = 0; r < 3; ++r) {
      unsigned n = 0;
      char tail = 0;
      if (has_prefix(o->name, kPrefixes[r]) &&
          std::sscanf(o->name + std::strlen(kPrefixes[r]), "%u%c", &n, &tail) == 1 && (!best || r < best->rank))
        best = ComputeName{r, n};
    }
  }
  return best;
}

// Without any compute device in the topology (lstopo built without NVML/CUDA/RSMI),
// the PCI class decides: 3D and "other display" controllers of a GPU vendor, AMD's
// processing accelerators (Instinct), and NVIDIA VGA cards. A VGA controller of any
// other vendor is a display chip (ASPEED, Matrox, the ATI ES1000 of older servers).
bool gpu_by_class(hwloc_obj_t pci) {
  const unsigned cls = class_of(pci), vendor = vendor_of(pci);
  if (vendor != kNvidia && vendor != kAmd) return false;
  if (cls == 0x0302 || cls == 0x0380 || cls == 0x1200) return true;
  return cls == 0x0300 && vendor == kNvidia;
}

bool has_osdev(hwloc_obj_t pci, hwloc_obj_osdev_type_t type) {
  for (hwloc_obj_t o = pci->io_first_child; o != nullptr; o = o->next_sibling)
    if (o->type == HWLOC_OBJ_OS_DEVICE && o->attr->osdev.type == type) return true;
  return false;
}

// Network controllers (0x02xx: Ethernet, InfiniBand 0x0207, fabric/Omni-Path 0x0208),
// InfiniBand serial-bus controllers (0x0c06, how older Mellanox cards report), and
// anything with an OpenFabrics (verbs) device.
bool is_nic(hwloc_obj_t pci) {
  const unsigned cls = class_of(pci);
  return (cls >> 8) == 0x02 || cls == 0x0c06 || has_osdev(pci, HWLOC_OBJ_OSDEV_OPENFABRICS);
}

unsigned depth_of(hwloc_obj_t o) {
  unsigned d = 0;
  for (; o->parent != nullptr; o = o->parent) ++d;
  return d;
}

// Number of tree edges between two objects: up from each to their lowest common ancestor.
unsigned hops(hwloc_obj_t a, hwloc_obj_t b) {
  unsigned da = depth_of(a), db = depth_of(b), n = 0;
  for (; da > db; --da, ++n) a = a->parent;
  for (; db > da; --db, ++n) b = b->parent;
  for (; a != b; a = a->parent, b = b->parent) n += 2;
  return n;
}

// The NUMA domain an I/O device is local to: the lowest-numbered node of its
// non-I/O ancestor (on sub-NUMA-clustered packages that is the domain it hangs off).
std::size_t numa_of(hwloc_topology_t topo, hwloc_obj_t io, const std::vector<NumaNode>& numas) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, io);
  const int first = anchor->nodeset ? hwloc_bitmap_first(anchor->nodeset) : -1;
  for (std::size_t i = 0; i < numas.size(); ++i)
    if (static_cast<int>(numas[i].os_index) == first) return i;
  return 0;
}

unsigned first_active_port(hwloc_obj_t osdev) {
  for (unsigned i = 0; i < osdev->infos_count; ++i) {
    unsigned port = 0;
    // hwloc reports InfiniBand port states as numbers; 4 is ACTIVE.
    if (std::sscanf(osdev->infos[i].name, "Port%uState", &port) == 1 && std::strcmp(osdev->infos[i].value, "4") == 0)
      return port;
  }
  return 1;
}

// The NVIDIA driver's minor (the N of /dev/nvidiaN, what gres.conf File= names).
std::optional<unsigned> nvidia_minor(const std::string& dir, const std::string& bus) {
  std::ifstream in(dir + "/" + bus + "/information");
  for (std::string line; std::getline(in, line);) {
    unsigned minor = 0;
    if (std::sscanf(line.c_str(), "Device Minor: %u", &minor) == 1) return minor;
  }
  return std::nullopt;
}

GpuVendor vendor_enum(hwloc_obj_t pci) {
  if (vendor_of(pci) == kNvidia) return GpuVendor::nvidia;
  if (vendor_of(pci) == kAmd) return GpuVendor::amd;
  return GpuVendor::other;
}

struct GpuCandidate {
  hwloc_obj_t pci;
  std::optional<ComputeName> name;
  std::optional<unsigned> minor;
};

void add_gpus(hwloc_topology_t topo, bool live, const std::string& nvidia_gpus, Machine& m,
              std::vector<hwloc_obj_t>& gpu_objs) {
  std::vector<GpuCandidate> found;
  bool any_compute = false;
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo, p)) != nullptr;)
    any_compute = any_compute || compute_name(p).has_value();
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo, p)) != nullptr;) {
    auto name = compute_name(p);
    // When hwloc saw compute devices, exactly those are GPUs; a card without one is a
    // display chip or an OpenCL-only device of another vendor.
    if (any_compute ? !name.has_value() : !gpu_by_class(p)) continue;
    found.push_back({p, name, live && vendor_of(p) == kNvidia ? nvidia_minor(nvidia_gpus, bus_id(p)) : std::nullopt});
  }
  const bool all_minors = !found.empty() && std::all_of(found.begin(), found.end(), [](auto& g) { return g.minor.has_value(); });
  const bool all_named = !found.empty() && std::all_of(found.begin(), found.end(), [](auto& g) { return g.name.has_value(); });
  // Vendor first (Slurm lists each gres File= family on its own), then the index.
  auto key = [&](const GpuCandidate& g) {
    const unsigned idx = all_minors ? *g.minor : all_named ? g.name->index : 0;
    const int rank = all_minors || !all_named ? 0 : g.name->rank;
    return std::make_tuple(static_cast<int>(vendor_enum(g.pci)), rank, idx, bus_id(g.pci));
  };
  std::stable_sort(found.begin(), found.end(), [&](auto& a, auto& b) { return key(a) < key(b); });
  m.gpu_order = found.empty()  ? "no GPUs"
                : all_minors ? "NVIDIA driver minors (/dev/nvidiaN)"
                : all_named  ? "NVML/CUDA/RSMI device indexes"
                             : "PCI bus order (fallback: the topology names no NVML, CUDA or RSMI device)";
  for (const auto& c : found) {
    Gpu g;
    g.index = static_cast<unsigned>(m.gpus.size());
    g.pci_bus_id = bus_id(c.pci);
    g.numa = numa_of(topo, c.pci, m.numas);
    g.vendor = vendor_enum(c.pci);
    g.local_pus = bitmap_to_list(hwloc_get_non_io_ancestor_obj(topo, c.pci)->cpuset);
    for (hwloc_obj_t o = c.pci->io_first_child; o != nullptr; o = o->next_sibling)
      if (o->type == HWLOC_OBJ_OS_DEVICE && o->name != nullptr)
        g.os_names += (g.os_names.empty() ? "" : ",") + std::string(o->name);
    m.gpus.push_back(std::move(g));
    gpu_objs.push_back(c.pci);
  }
}

void add_nics(hwloc_topology_t topo, Machine& m, std::vector<hwloc_obj_t>& kept) {
  std::vector<hwloc_obj_t> nic_objs;
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo, p)) != nullptr;)
    if (is_nic(p)) nic_objs.push_back(p);
  std::sort(nic_objs.begin(), nic_objs.end(), [](auto a, auto b) { return bus_id(a) < bus_id(b); });
  for (hwloc_obj_t p : nic_objs) {
    Nic n{bus_id(p), {}, 1, {}, numa_of(topo, p, m.numas)};
    for (hwloc_obj_t o = p->io_first_child; o != nullptr; o = o->next_sibling) {
      if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == nullptr) continue;
      if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && n.hca.empty()) {
        n.hca = o->name;
        n.port = first_active_port(o);
      } else if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && n.netdev.empty()) {
        n.netdev = o->name;
      }
    }
    if (n.hca.empty() && n.netdev.empty()) continue;  // a VF without a name to hand to NCCL or UCX
    m.nics.push_back(std::move(n));
    kept.push_back(p);
  }
}

}  // namespace

const char* vendor_name(GpuVendor v) {
  switch (v) {
    case GpuVendor::nvidia: return "nvidia";
    case GpuVendor::amd: return "amd";
    default: return "other";
  }
}

Machine describe(hwloc_topology_t topo, bool live, const std::string& nvidia_gpus) {
  Machine m;
  if (const char* host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName")) m.hostname = host;
  m.allowed_pus = bitmap_to_list(hwloc_topology_get_allowed_cpuset(topo));

  std::vector<hwloc_obj_t> numa_objs;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) != nullptr;)
    numa_objs.push_back(n);
  std::sort(numa_objs.begin(), numa_objs.end(), [](auto a, auto b) { return a->os_index < b->os_index; });
  for (hwloc_obj_t n : numa_objs) m.numas.push_back({n->os_index, {}, bitmap_to_list(n->cpuset)});
  if (m.numas.empty()) m.numas.push_back({0, {}, bitmap_to_list(hwloc_get_root_obj(topo)->cpuset)});

  for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c)) != nullptr;) {
    Core core{c->os_index, bitmap_to_list(c->cpuset), 0};
    if (core.pus.empty()) continue;
    for (std::size_t i = 0; i < m.numas.size(); ++i)
      if (std::binary_search(m.numas[i].pus.begin(), m.numas[i].pus.end(), core.pus.front())) core.numa = i;
    m.numas[core.numa].cores.push_back(m.cores.size());
    m.cores.push_back(std::move(core));
  }

  std::vector<hwloc_obj_t> gpu_objs, nic_objs;
  add_gpus(topo, live, nvidia_gpus, m, gpu_objs);
  add_nics(topo, m, nic_objs);
  for (hwloc_obj_t g : gpu_objs) {
    m.gpu_nic_hops.emplace_back();
    for (hwloc_obj_t n : nic_objs) m.gpu_nic_hops.back().push_back(hops(g, n));
  }
  for (std::size_t i = 0; i < m.numas.size(); ++i) {
    m.numa_nic_hops.emplace_back();
    // A NUMA node is a memory child; its parent is the package/die its cores share.
    hwloc_obj_t anchor = i < numa_objs.size() ? numa_objs[i]->parent : hwloc_get_root_obj(topo);
    for (hwloc_obj_t n : nic_objs) m.numa_nic_hops.back().push_back(hops(anchor, n));
  }
  return m;
}

}  // namespace saker::affinity
