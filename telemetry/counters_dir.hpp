// The per-step directory where each rank keeps its collective counters file
// (comm_counters.hpp). The ranks' user owns it, so removing it must not follow anything
// that user may have planted there. Used by the sampler at step end and by spank_saker.so
// when the sampler could not do it; it depends on nothing but libc, so the plugin compiles
// it in without linking libsaker_telemetry.
#pragma once

#include <string>

namespace saker::telemetry {

// Removes the directory's entries (unlinkat, never following links), then the directory.
// Best effort: a directory that cannot be opened, or an entry that cannot be removed, is
// left as it is. An empty path does nothing.
void remove_counters_dir(const std::string& dir) noexcept;

}  // namespace saker::telemetry
