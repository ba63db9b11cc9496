// Linux CPU-list syntax ("0-3,8,10-11"), as in /proc/self/status Cpus_allowed_list,
// taskset -c and SLURM_STEP_GPUS. Sets are kept as sorted, duplicate-free vectors so
// plans compare and print deterministically.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saker::affinity {

using IndexList = std::vector<unsigned>;  // sorted, no duplicates

// Parses "0-3,8". Throws saker::Error naming `what` (e.g. "--cpuset") on bad syntax.
IndexList parse_index_list(std::string_view text, const std::string& what);
// Formats as the kernel does: ranges collapsed, "" for an empty set.
std::string format_index_list(const IndexList& list);

IndexList intersect(const IndexList& a, const IndexList& b);

}  // namespace saker::affinity
