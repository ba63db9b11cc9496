// Loading a node's topology with hwloc (live or from XML) and turning it into the
// planner's Machine model. The live discovery (PCI included) takes tens of
// milliseconds, so the plugin keeps an XML copy in slurmd's spool and every task
// after the first reads that instead (load_cached).
#pragma once

#include <string>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

// Each throws saker::Error naming the file or step that failed and why.
Machine load_xml_file(const std::string& path);
Machine load_xml_buffer(const std::string& xml);
Machine load_live();
// The live topology (with PCI devices, without caches) as hwloc v2 XML.
std::string live_topology_xml();

// Loads `path` if it exists and was written since the last boot; otherwise discovers
// the live topology and writes it to `path` atomically (temporary file + rename), so
// concurrent tasks never read half a file. A cache that cannot be written is only
// logged: the live topology is still returned.
Machine load_cached(const std::string& path);

}  // namespace saker::affinity
