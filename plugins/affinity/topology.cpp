#include "plugins/affinity/topology.hpp"

#include <fcntl.h>
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/log.hpp"
#include "plugins/affinity/describe.hpp"
#include "plugins/affinity/hwloc_reason.hpp"
#include "plugins/affinity/machine_cache.hpp"

namespace saker::affinity {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

// Caches and instruction caches are not used by the planner; dropping them keeps the
// exported XML small. PCI devices and their OS devices are kept, and so are the CPUs
// this process may not use (see topology.hpp).
TopologyPtr make_topology(bool from_xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error("saker: hwloc_topology_init failed (out of memory?)");
  TopologyPtr topo(raw);
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_cache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  // From XML keep every I/O object the file holds; live, keep the ones that matter
  // (GPUs, NICs, the bridges above them) and not every SATA controller.
  hwloc_topology_set_io_types_filter(raw, from_xml ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return topo;
}

std::string printable_start(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 24)) out += (c >= 32 && c < 127) ? c : '.';
  return out;
}

// hwloc answers most broken files with EINVAL and nothing else; these checks name
// what is wrong before hwloc sees the bytes.
void check_xml_text(const std::string& xml, const std::string& what) {
  const auto start = xml.find_first_not_of(" \t\r\n");
  const std::string regenerate = "regenerate it on the node with `lstopo --of xml FILE.xml`";
  if (start == std::string::npos)
    throw Error(explain(what + " is empty", "an export that never ran, or a file truncated to nothing", regenerate));
  if (xml[start] != '<')
    throw Error(explain(what + " is not XML (it starts with \"" + printable_start(xml.substr(start)) + "\")",
                        "a topology file must be hwloc XML", "give the file `lstopo FILE.xml` writes, or " + regenerate));
  const auto root = xml.find("<topology");
  if (root == std::string::npos)
    throw Error(explain(what + " is XML but not an hwloc topology (no <topology> element)",
                        "the file is some other XML document", "give the file `lstopo FILE.xml` writes"));
  unsigned major = 0, minor = 0;
  const auto version = xml.find("version=\"", root);
  const auto tag_end = xml.find('>', root);
  if (version != std::string::npos && version < tag_end &&
      std::sscanf(xml.c_str() + version, "version=\"%u.%u\"", &major, &minor) == 2 &&
      major > HWLOC_API_VERSION >> 16) {
    throw Error(explain(what + " is hwloc XML version " + std::to_string(major) + "." + std::to_string(minor) +
                            ", exported by a newer hwloc than the one Saker was built with (" HWLOC_VERSION
                            ", which reads XML up to version " + std::to_string(HWLOC_API_VERSION >> 16) + ".x)",
                        "hwloc cannot import XML from a newer major version",
                        "re-export it with `lstopo --of xml --export-xml-flags v2 FILE.xml` on the newer hwloc, "
                        "or build Saker against that newer hwloc"));
  }
  if (xml.find("</topology>", root) == std::string::npos)
    throw Error(explain(what + " is truncated (" + std::to_string(xml.size()) + " bytes, no closing </topology>)",
                        "the file was cut short (a full disk or an interrupted copy)", regenerate));
}

// `path`: the file the bytes came from, if any, so hwloc's own reason can be asked for.
Machine load_xml_text(const std::string& xml, const std::string& what, const std::string& path = {}) {
  check_xml_text(xml, what);
  auto topo = make_topology(true);
  errno = 0;
  if (hwloc_topology_set_xmlbuffer(topo.get(), xml.data(), static_cast<int>(xml.size() + 1)) != 0 ||
      hwloc_topology_load(topo.get()) != 0) {
    const std::string err = std::strerror(errno == 0 ? EINVAL : errno);
    const std::string reason = path.empty() ? std::string() : hwloc_reason(path);
    throw Error(explain("hwloc cannot load " + what,
                        reason.empty() ? err + " (hwloc gave no reason; `HWLOC_XML_VERBOSE=1 lstopo --input FILE` shows it)"
                                       : "hwloc says: " + reason,
                        "regenerate the file with `lstopo FILE.xml` on the node"));
  }
  return describe(topo.get(), false);
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // open/write, not std::ofstream: this runs in slurmstepd (common/file.hpp says why).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  int e = fd < 0 ? errno : 0;
  for (std::size_t done = 0; e == 0 && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) done += static_cast<std::size_t>(n);
    else if (n == 0) e = EIO;
    else if (errno != EINTR) e = errno;
  }
  if (fd >= 0 && ::close(fd) != 0 && e == 0) e = errno;
  if (e != 0) {
    ::unlink(tmp.c_str());
    throw Error(explain("cannot write the topology cache " + tmp, std::strerror(e),
                        "check that the directory exists and is writable by root"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    ::unlink(tmp.c_str());
    throw Error(explain("cannot install the topology cache " + path, std::strerror(e),
                        "check that the directory is writable by root"));
  }
}

void try_write(const std::string& path, const std::string& bytes, const std::string& what) {
  if (path.empty()) return;
  try {
    write_atomically(path, bytes);
    log::info("cached this node's " + what + " in " + path);
  } catch (const Error& e) {
    log::warn(e.what());
  }
}

TopologyPtr live_topology() {
  auto topo = make_topology(false);
  if (hwloc_topology_load(topo.get()) != 0)
    throw Error(explain("hwloc cannot discover this machine's topology", std::strerror(errno),
                        "run `lstopo` on the node to see hwloc's reason"));
  return topo;
}

// What changes the live topology: a reboot (new boot id). hwloc's version is in every key.
std::string boot_id() {
  auto id = file::read("/proc/sys/kernel/random/boot_id");
  return "live:" + id.value_or("unknown-boot");
}

}  // namespace

IndexList Machine::all_pus() const {
  IndexList out;
  for (const auto& c : cores) out.insert(out.end(), c.pus.begin(), c.pus.end());
  std::sort(out.begin(), out.end());
  return out;
}

Machine load_xml_file(const std::string& path) {
  auto xml = file::read(path);
  if (!xml)
    throw Error(explain("cannot read the topology file " + path, std::strerror(errno),
                        "give an hwloc XML file (`lstopo FILE.xml` writes one)"));
  return load_xml_text(*xml, "the topology file " + path, path);
}

Machine load_xml_buffer(const std::string& xml, const std::string& what) { return load_xml_text(xml, what); }

Machine load_live() { return describe(live_topology().get(), true); }

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

Machine load_cached(const TopologySource& source) {
  std::optional<std::string> xml;
  if (!source.xml_path.empty()) xml = file::read(source.xml_path);
  const std::uint64_t key = cache_key(xml ? "xml:" + *xml : boot_id());
  if (!source.cache_path.empty())
    if (auto bytes = file::read(source.cache_path))
      if (auto cached = decode_machine(*bytes, key)) return std::move(*cached);
  Machine m;
  if (xml) {
    m = load_xml_text(*xml, "the topology file " + source.xml_path, source.xml_path);
  } else if (!source.xml_path.empty()) {
    // topology= names a file that is not there yet: discover once and write it, so
    // saker-topo and people can read what the plugin used.
    const std::string live = live_topology_xml();
    try_write(source.xml_path, live, "topology (hwloc XML)");
    m = load_xml_text(live, "this machine's topology");
    try_write(source.cache_path, encode_machine(m, cache_key("xml:" + live)), "topology (compact)");
    return m;
  } else {
    m = load_live();
  }
  try_write(source.cache_path, encode_machine(m, key), "topology (compact)");
  return m;
}

}  // namespace saker::affinity
