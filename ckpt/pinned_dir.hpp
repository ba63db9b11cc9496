#pragma once

#include <filesystem>
#include <memory>

#include "saker/ckpt.hpp"

namespace saker::ckpt {

// The checkpoint directory, opened once per save (issue 30: a symlink flipped between the
// residency check and the write once got a temporary file written in another zone).
// Following symlinks here is deliberate: a checkpoint directory may legitimately be a
// symlink, and it is judged by the directory the descriptor refers to (`real`, read back
// from /proc/self/fd/N), never by the name. Every file of the save is then created, written,
// sealed, renamed and fsync'ed through `via` = "/proc/self/fd/N": the kernel resolves that
// magic link to the open directory itself, so nothing anybody renames or relinks afterwards
// changes where the bytes go. (A path, not openat(), because HDF5 1.x has no "create at this
// dirfd" call: its sec2 driver opens by name, and the core driver would hold the whole file in
// memory; a /proc/self/fd/N/NAME path works for HDF5, for our own open/rename/fsync, and
// for the async writer thread, which shares the descriptor table.)
struct PinnedDir {
  int fd = -1;
  std::filesystem::path real;  // where the descriptor leads: what the residency rule judges
  std::filesystem::path via;   // "/proc/self/fd/N": paths under it resolve through the descriptor
  PinnedDir() = default;
  PinnedDir(const PinnedDir&) = delete;
  PinnedDir& operator=(const PinnedDir&) = delete;
  ~PinnedDir();
};

// Opens dir (following a symlink on purpose) and reads back where the descriptor leads.
std::shared_ptr<PinnedDir> pin_directory(const std::filesystem::path& dir);
// After the guard judged `p.real`: the name must still lead to the descriptor's directory,
// or the guard judged some other directory than the one written to (fail closed).
void confirm_pinned(const PinnedDir& p, const std::filesystem::path& dir);
// Opens the directory once and judges that directory against options.guard.
std::shared_ptr<PinnedDir> pin_and_check(const std::filesystem::path& dir, const Options& options, const State& state,
                                         bool encrypted);

}  // namespace saker::ckpt
