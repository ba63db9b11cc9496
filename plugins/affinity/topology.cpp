#include "plugins/affinity/topology.hpp"

#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::affinity {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

// Caches and instruction caches are not used by the planner; dropping them keeps the
// cached XML small and fast to parse. PCI devices and their OS devices are kept.
TopologyPtr make_topology(bool from_xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error("saker: hwloc_topology_init failed (out of memory?)");
  TopologyPtr topo(raw);
  hwloc_topology_set_cache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  // From XML keep every I/O object the file holds; live, keep the ones that matter
  // (GPUs, NICs, the bridges above them) and not every SATA controller.
  hwloc_topology_set_io_types_filter(raw, from_xml ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return topo;
}

void load_or_throw(hwloc_topology_t topo, const std::string& what) {
  if (hwloc_topology_load(topo) != 0)
    throw Error(explain("cannot load the topology from " + what, std::strerror(errno),
                        "check the file with `lstopo --input FILE`, or regenerate it with `lstopo FILE.xml`"));
}

IndexList bitmap_to_list(hwloc_const_bitmap_t set) {
  IndexList out;
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

bool is_gpu(hwloc_obj_t pci) {
  const unsigned cls = pci->attr->pcidev.class_id;
  const unsigned vendor = pci->attr->pcidev.vendor_id;
  // 3D controllers and "other display" are compute GPUs; a VGA controller counts only
  // from a GPU vendor, so a BMC's ASPEED VGA chip never shifts the GPU numbering.
  if (cls == 0x0302 || cls == 0x0380) return true;
  return cls == 0x0300 && (vendor == 0x10de || vendor == 0x1002);
}

bool is_nic(hwloc_obj_t pci) { return (pci->attr->pcidev.class_id >> 8) == 0x02; }

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

Machine describe(hwloc_topology_t topo) {
  Machine m;
  if (const char* host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName")) m.hostname = host;

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
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo, p)) != nullptr;) {
    if (is_gpu(p)) {
      gpu_objs.push_back(p);
    } else if (is_nic(p)) {
      nic_objs.push_back(p);
    }
  }
  auto by_bus = [](hwloc_obj_t a, hwloc_obj_t b) { return bus_id(a) < bus_id(b); };
  std::sort(gpu_objs.begin(), gpu_objs.end(), by_bus);
  std::sort(nic_objs.begin(), nic_objs.end(), by_bus);

  for (hwloc_obj_t p : gpu_objs) {
    Gpu g{static_cast<unsigned>(m.gpus.size()), bus_id(p), {}, numa_of(topo, p, m.numas)};
    for (hwloc_obj_t o = p->io_first_child; o != nullptr; o = o->next_sibling)
      if (o->type == HWLOC_OBJ_OS_DEVICE) g.os_names += (g.os_names.empty() ? "" : ",") + std::string(o->name);
    m.gpus.push_back(std::move(g));
  }
  std::vector<hwloc_obj_t> kept_nics;
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
    if (n.hca.empty() && n.netdev.empty()) continue;  // no name to hand to NCCL or UCX
    m.nics.push_back(std::move(n));
    kept_nics.push_back(p);
  }

  for (hwloc_obj_t g : gpu_objs) {
    m.gpu_nic_hops.emplace_back();
    for (hwloc_obj_t n : kept_nics) m.gpu_nic_hops.back().push_back(hops(g, n));
  }
  for (std::size_t i = 0; i < m.numas.size(); ++i) {
    m.numa_nic_hops.emplace_back();
    // A NUMA node is a memory child; its parent is the package/die its cores share.
    hwloc_obj_t anchor = i < numa_objs.size() ? numa_objs[i]->parent : hwloc_get_root_obj(topo);
    for (hwloc_obj_t n : kept_nics) m.numa_nic_hops.back().push_back(hops(anchor, n));
  }
  return m;
}

bool fresh_since_boot(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  std::ifstream uptime("/proc/uptime");
  double up = 0;
  if (!(uptime >> up)) return true;  // cannot tell: trust the file
  return st.st_mtime >= ::time(nullptr) - static_cast<time_t>(up);
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      ::unlink(tmp.c_str());
      throw Error(explain("cannot write the topology cache " + tmp, std::strerror(errno),
                          "check that the directory exists and is writable by root"));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(explain("cannot install the topology cache " + path, std::strerror(e),
                        "check that the directory is writable by root"));
  }
}

}  // namespace

IndexList Machine::all_pus() const {
  IndexList out;
  for (const auto& c : cores) out.insert(out.end(), c.pus.begin(), c.pus.end());
  std::sort(out.begin(), out.end());
  return out;
}

Machine load_xml_file(const std::string& path) {
  auto topo = make_topology(true);
  if (hwloc_topology_set_xml(topo.get(), path.c_str()) != 0)
    throw Error(explain("cannot read the topology file " + path, std::strerror(errno),
                        "give an hwloc XML file (`lstopo FILE.xml` writes one)"));
  load_or_throw(topo.get(), path);
  return describe(topo.get());
}

Machine load_xml_buffer(const std::string& xml) {
  auto topo = make_topology(true);
  if (hwloc_topology_set_xmlbuffer(topo.get(), xml.data(), static_cast<int>(xml.size() + 1)) != 0)
    throw Error(explain("cannot parse an hwloc XML buffer", std::strerror(errno), "give hwloc v2 XML"));
  load_or_throw(topo.get(), "an XML buffer");
  return describe(topo.get());
}

namespace {
TopologyPtr live_topology() {
  auto topo = make_topology(false);
  load_or_throw(topo.get(), "this machine (hwloc live discovery)");
  return topo;
}
}  // namespace

Machine load_live() { return describe(live_topology().get()); }

std::string live_topology_xml() {
  auto topo = live_topology();
  char* buf = nullptr;
  int len = 0;
  if (hwloc_topology_export_xmlbuffer(topo.get(), &buf, &len, 0) != 0)
    throw Error(explain("cannot export the live topology as XML", std::strerror(errno), "report this hwloc failure"));
  std::string xml(buf, len > 0 ? static_cast<std::size_t>(len - 1) : 0);
  hwloc_free_xmlbuffer(topo.get(), buf);
  return xml;
}

Machine load_cached(const std::string& path) {
  if (fresh_since_boot(path)) return load_xml_file(path);
  const std::string xml = live_topology_xml();
  try {
    write_atomically(path, xml);
    log::info("cached this node's topology in " + path);
  } catch (const Error& e) {
    log::warn(e.what());
  }
  return load_xml_buffer(xml);
}

}  // namespace saker::affinity
