// Loading a node's topology with hwloc (live or from XML) and turning it into the
// planner's Machine model. Every load keeps the CPUs the loading process may not use
// (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED): inside a cgroup or cpuset, locality must
// still be the whole machine's, and the job's CPUs are applied only when binding.
//
// The live discovery (PCI included) takes tens of milliseconds and parsing XML a few,
// so the plugin keeps a compact binary copy of the Machine (machine_cache.hpp) and
// every step after the first reads that instead (load_cached).
#pragma once

#include <string>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

// Each throws saker::Error naming the file, what is wrong with it (empty, not XML,
// truncated, from a newer hwloc, or hwloc's refusal) and the fix.
Machine load_xml_file(const std::string& path);
Machine load_xml_buffer(const std::string& xml, const std::string& what = "an XML buffer");
Machine load_live();
// The live topology (with PCI devices and disallowed CPUs, without caches) as hwloc v2 XML.
std::string live_topology_xml();

// Where the plugin's topology comes from, and where its compact copy is kept.
struct TopologySource {
  std::string xml_path;    // topology=FILE; empty: discover this machine
  std::string cache_path;  // binary cache; empty: no cache
};

// xml_path given and present: the file, via the cache when the cache was written from
// the same bytes. xml_path given but absent: this machine is discovered and written
// there as XML (atomically), and cached. No xml_path: the cache when it was written
// since this boot by the same hwloc, else live discovery, cached. A cache that cannot
// be written is only logged.
Machine load_cached(const TopologySource& source);

}  // namespace saker::affinity
