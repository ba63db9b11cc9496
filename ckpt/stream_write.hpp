// Streams tensor bytes into their places in a new file: pieces are written, checksummed
// and handed to the disk as they go, and pages already on disk leave the page cache.
//
// Why not one big pwrite per tensor followed by fsync: a checkpoint is a NEW file while
// the previous one must stay intact until the commit, so every byte needs a freshly
// allocated page-cache page. Measured on our VMs (free pages are reported back to the
// hypervisor), filling 1 GiB of fresh page cache runs at 0.25-0.4 GB/s, while pages
// freed a moment earlier refill at 3+ GB/s. Here at most a few pieces are dirty at once:
// writeback of piece k starts at once (sync_file_range WRITE) and, once piece k-2 is on
// disk, its (now clean) pages are dropped, so the next pieces reuse those warm pages.
// The final fsync then has little left to do, the disk works while we copy and hash,
// and a checkpoint no longer pushes the job's own data out of the page cache.
// sync_file_range and fadvise are hints: durability still comes from commit::publish's
// fsync, and filesystems that refuse them (EINVAL, ESPIPE, ENOSYS) are written plainly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "common/hash.hpp"

namespace saker::ckpt::stream {

// One region to fill: the bytes go to [offset, offset + bytes.size()).
struct Region {
  std::uint64_t offset = 0;
  std::span<const std::byte> bytes;
  hash::Digest128 xxh3;  // filled by write_regions: the XXH3-128 of bytes
};

// Pieces of this size are written, hashed and pushed to the disk one at a time.
inline constexpr std::size_t kPieceBytes = std::size_t{16} << 20;
// How many pieces may be dirty or under writeback before we wait for the oldest.
inline constexpr std::size_t kPiecesInFlight = 2;

// Writes every region (any order; sorted by offset inside) through a new descriptor on
// `path` and sets each region's checksum. Throws saker::Error naming the file on a
// write error. Does not fsync: the caller's commit does.
void write_regions(const std::filesystem::path& path, std::span<Region> regions);

}  // namespace saker::ckpt::stream
