// Whole small files (configuration, records, caches) read with open/read, without
// iostreams.
//
// Why not std::ifstream: the first iostream a process opens builds the C++ locale, 0.1 to
// 0.2 ms of CPU. slurmstepd starts afresh for every step on every node, so spank_saker.so's
// per-step reads (the node's job record, the topology cache, gres.conf) paid it each time.
#pragma once

#include <optional>
#include <string>

namespace saker::file {

// The file's bytes; nullopt when it cannot be opened or read, with errno saying why
// (ENOENT: it does not exist).
std::optional<std::string> read(const std::string& path);

}  // namespace saker::file
