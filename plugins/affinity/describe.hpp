// hwloc topology -> the planner's Machine: which PCI devices are GPUs and NICs, in
// what order, and how far apart they are. Kept apart from loading (topology.cpp) so
// the rules that decide GPU and NIC identity read in one place.
#pragma once

#include <hwloc.h>

#include <string>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

// `live`: the topology is this machine's, so the NVIDIA driver's directory
// (`nvidia_gpus`, one BUS-ID/information file per GPU) gives the /dev/nvidiaN minors.
// The topology must have been loaded with disallowed CPUs included
// (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED), so locality is the whole machine's.
Machine describe(hwloc_topology_t topo, bool live, const std::string& nvidia_gpus = "/proc/driver/nvidia/gpus");

}  // namespace saker::affinity
