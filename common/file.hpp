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

// Opens `path` for writing a file only this user reads (a job's trace, metrics, marker):
// a new file is created with `mode` (O_EXCL|O_NOFOLLOW); an existing one is reused only if
// it is this user's own regular file, and then set to `mode`. A symbolic link, or a file
// another user planted there to read or steer what is written, is refused. `how`: O_TRUNC
// (start afresh) or O_APPEND. Returns the descriptor (O_CLOEXEC), or -1 with `why` set.
int open_private(const std::string& path, int how, unsigned mode, std::string* why);

}  // namespace saker::file
