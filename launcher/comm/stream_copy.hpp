// Copies that bypass the cache (non-temporal stores), and when a shared-memory collective
// should use them for a block it copies within the rank (its own block of an alltoall,
// its own part of an allgather).
#pragma once

#include <cstddef>

#include "launcher/comm/tuning.hpp"

namespace saker::comm {

// Copies bytes from src to dst with non-temporal stores, then fences, so that a flag
// stored afterwards is not seen before the data. dst and src must not overlap.
void copy_streaming(char* dst, const char* src, std::size_t bytes) noexcept;

// Copies bytes within a rank: streamed when `stream` and the two ranges are apart, else
// by memmove (overlapping ranges, an in-place call).
void copy_within(char* dst, const char* src, std::size_t bytes, bool stream) noexcept;

// The footprint (bytes a call reads and writes on this rank) past which a copy within the
// rank streams: the rank's share of the last-level cache, `cache` shared by `members` ranks
// (at most its CPUs). Past it the destination leaves the cache before anyone reads it, so
// an ordinary store's read of each line first (read-for-ownership) is wasted. Never
// (SIZE_MAX) when the cache is unknown.
std::size_t stream_past(Cache cache, int members);

}  // namespace saker::comm
