// Applying a plan to the calling process: CPU affinity (sched_setaffinity) and the
// memory policy (the set_mempolicy system call: libnuma is not a dependency, and
// hwloc's binding calls refuse a topology loaded from XML unless told it is this
// system). Both act on the calling thread, which in task init is the whole task.
#pragma once

#include <sys/types.h>

#include "plugins/affinity/cpu_list.hpp"

namespace saker::affinity {

// Throws saker::Error naming the CPUs and the reason (e.g. outside the cgroup's cpuset).
void bind_cpus(const IndexList& pus);
// MPOL_BIND to one NUMA node. Throws saker::Error if the kernel refuses (e.g. the
// node does not exist here, or is outside the cgroup's mems).
void bind_memory(unsigned numa_os_index);
// The CPU affinity of a process (0 = the caller).
IndexList cpu_affinity(pid_t pid = 0);

}  // namespace saker::affinity
