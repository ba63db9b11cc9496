// hwloc topology -> the planner's Machine: which PCI devices are GPUs and NICs, in
// what order, and how far apart they are. Kept apart from loading (topology.cpp) so
// the rules that decide GPU and NIC identity read in one place.
#pragma once

#include <hwloc.h>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

// `live`: the topology is this machine's, so /proc/driver/nvidia may give the
// driver's device minors. The topology must have been loaded with disallowed CPUs
// included (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED), so locality is the whole machine's.
Machine describe(hwloc_topology_t topo, bool live);

}  // namespace saker::affinity
