// The compact form of a Machine that the plugin caches in slurmd's spool: what the
// planner needs and nothing else, so a step reads it in microseconds whatever the
// XML parser's speed on that machine. The cache is keyed by a hash of its inputs
// (the topology file's bytes, or this boot and the hwloc API for live discovery):
// a different key, another format version or a damaged file is a miss, never an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

std::string encode_machine(const Machine& machine, std::uint64_t key);
// nullopt when `bytes` is not a cache of this format for `key`.
std::optional<Machine> decode_machine(const std::string& bytes, std::uint64_t key);

// FNV-1a over the inputs, mixed with the format version and the hwloc API built against.
std::uint64_t cache_key(const std::string& inputs);

}  // namespace saker::affinity
