// The planner's view of a node: a plain, hwloc-free model extracted once from the
// topology (topology.hpp). Keeping hwloc out of the planner makes plans cheap to
// compute per task and easy to test, and every list here is in a fixed order so
// plans are deterministic.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "plugins/affinity/cpu_list.hpp"

namespace saker::affinity {

struct Core {
  unsigned os_index = 0;
  IndexList pus;          // OS indexes of its hardware threads
  std::size_t numa = 0;   // position in Machine::numas
};

struct NumaNode {
  unsigned os_index = 0;  // what set_mempolicy and numactl call it
  std::vector<std::size_t> cores;  // positions in Machine::cores, in topology order
  IndexList pus;
};

// Who made a GPU: decides which variable names it (CUDA_VISIBLE_DEVICES for NVIDIA,
// ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES for AMD).
enum class GpuVendor { nvidia, amd, other };

// GPUs are the devices Slurm's gres counts, numbered as Slurm numbers them: by the
// NVIDIA driver's /dev/nvidiaN minor when it is known (live discovery), else by the
// NVML, CUDA or RSMI device index hwloc recorded, and by PCI bus id only when the
// topology names no compute device at all (Machine::gpu_order says which).
struct Gpu {
  unsigned index = 0;
  std::string pci_bus_id;  // 0000:07:00.0
  std::string os_names;    // hwloc OS devices under it (cuda0, nvml0, card1), for display
  std::size_t numa = 0;    // the NUMA domain the GPU hangs off
  GpuVendor vendor = GpuVendor::nvidia;
  IndexList local_pus;     // the whole machine's CPUs next to it, allowed or not
};

struct Nic {
  std::string pci_bus_id;
  std::string hca;      // RDMA device (OpenFabrics: mlx5_0), empty for plain Ethernet
  unsigned port = 1;    // first active RDMA port
  std::string netdev;   // kernel interface (ib0, eno1), may be empty
  std::size_t numa = 0;
  bool rdma() const { return !hca.empty(); }
  std::string name() const { return rdma() ? hca : netdev; }
};

const char* vendor_name(GpuVendor v);

struct Machine {
  std::string hostname;
  std::vector<Core> cores;      // topology (logical) order
  std::vector<NumaNode> numas;  // by OS index
  std::vector<Gpu> gpus;        // in Slurm's order (see Gpu)
  std::string gpu_order;        // how that order was found, for `saker-topo show` and explain
  std::vector<Nic> nics;        // by PCI bus id
  IndexList allowed_pus;        // the CPUs the exporting process was allowed (cgroup, cpuset)
  // Hops between two objects in the hwloc tree (PCI switches, host bridges, packages...),
  // the "PCI tree distance": [gpu][nic] and [numa][nic].
  std::vector<std::vector<unsigned>> gpu_nic_hops;
  std::vector<std::vector<unsigned>> numa_nic_hops;

  IndexList all_pus() const;
};

}  // namespace saker::affinity
