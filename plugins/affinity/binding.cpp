#include "plugins/affinity/binding.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace saker::affinity {
namespace {

constexpr int kMpolBind = 2;  // MPOL_BIND from <linux/mempolicy.h>
constexpr unsigned kMaxCpus = 8192;

}  // namespace

void bind_cpus(const IndexList& pus) {
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const std::size_t size = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(size, set);
  for (unsigned pu : pus)
    if (pu < kMaxCpus) CPU_SET_S(pu, size, set);
  const int rc = ::sched_setaffinity(0, size, set);
  const int e = errno;
  CPU_FREE(set);
  if (rc != 0)
    throw Error(explain("cannot bind the task to CPUs " + format_index_list(pus), std::strerror(e),
                        "check that the topology matches this node and that the CPUs are in the job's cpuset"));
}

void bind_memory(unsigned numa_os_index) {
  std::vector<unsigned long> mask(numa_os_index / (8 * sizeof(unsigned long)) + 1, 0);
  mask[numa_os_index / (8 * sizeof(unsigned long))] |= 1ul << (numa_os_index % (8 * sizeof(unsigned long)));
  // maxnode counts bits, and the kernel reads one less than it is given.
  const unsigned long maxnode = mask.size() * 8 * sizeof(unsigned long) + 1;
  if (::syscall(SYS_set_mempolicy, kMpolBind, mask.data(), maxnode) != 0)
    throw Error(explain("cannot bind the task's memory to NUMA node " + std::to_string(numa_os_index),
                        std::strerror(errno),
                        "check that the topology matches this node and that the node is in the job's cpuset mems"));
}

IndexList cpu_affinity(pid_t pid) {
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const std::size_t size = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(size, set);
  IndexList out;
  if (::sched_getaffinity(pid, size, set) == 0) {
    // Stop at the last set CPU, not at kMaxCpus: every task start asks (~90,000
    // instructions on a 2-CPU node for the whole mask, issue 30).
    const auto count = static_cast<std::size_t>(CPU_COUNT_S(size, set));
    for (unsigned i = 0; i < kMaxCpus && out.size() < count; ++i)
      if (CPU_ISSET_S(i, size, set)) out.push_back(i);
  }
  CPU_FREE(set);
  if (out.empty())
    throw Error(explain("cannot read the CPU affinity of process " + std::to_string(pid), std::strerror(errno),
                        "report this: every running process has a CPU affinity"));
  return out;
}

}  // namespace saker::affinity
