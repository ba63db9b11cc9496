// Checkpointer's private parts, shared by the files that implement it:
//   checkpointer.cpp  construction, the synchronous save, loads and the parents they record;
//   save_async.cpp    the snapshot, the writer thread and the handle that reports on it;
//   save_commit.cpp   one rank's file and the sharded commit protocol;
//   save_checks.cpp   what a state must satisfy, and the residency guard.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/crypto.hpp"
#include "ckpt/parent_digest.hpp"
#include "ckpt/pinned_dir.hpp"
#include "ckpt/provenance.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

namespace internal {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t);

// Throws saker::Error naming the rank, the tensor or the size that is wrong.
void validate(const State& st);
// What this rank writes: rank 0 writes replicated and partitioned tensors, the others
// only their partitioned slices (rank 0 alone writes replicated state).
std::vector<const Tensor*> tensors_to_write(const State& st);
// Rethrows the exception in flight; a saker::Error's message names the directory the
// user gave (`shown`), not /proc/self/fd/N.
[[noreturn]] void rethrow_named(const PinnedDir& p, const fs::path& shown);

}  // namespace internal

struct SaveJob {
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  SaveReport report;
  std::exception_ptr error;
  double stall_s = 0;
};

struct Checkpointer::Impl {
  std::optional<crypto::Key> key;
  std::shared_ptr<SaveJob> job;  // the save in flight, if any
  std::thread writer;
  // Snapshot memory, reused from one async save to the next so the stall is a memcpy into
  // warm pages rather than a fresh allocation.
  std::unique_ptr<std::byte[]> arena;
  std::size_t arena_size = 0;
  State snapshot;
  std::vector<std::string> rejected;  // by the last load_latest
  // Every checkpoint this Checkpointer loaded: the parents in the provenance of what it
  // saves from then on (ckpt/provenance.hpp). Only rank 0 records them (it writes the record).
  // Named by the SHA-256 of the loaded main file, hashed on a thread after the load returned
  // through the descriptor the load read it from (ckpt/parent_digest.hpp: a file swapped in
  // after the load cannot become the parent, one changed in place becomes none). The next
  // save waits for it (on the writer thread for save_async), never the load.
  std::vector<provenance::Parent> parents;
  std::vector<std::pair<provenance::Parent, std::unique_ptr<ParentDigest>>> pending;  // digests not yet joined
  LoadReport load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size, bool drop,
                  std::unique_ptr<ParentDigest>* digest);
  void note_parent(const LoadReport& r, std::uint32_t rank, std::unique_ptr<ParentDigest> digest);
  void add_parent(const provenance::Parent& p);
  const std::vector<provenance::Parent>& hashed_parents();

  // Writes through `dir` (a pinned directory's /proc/self/fd/N); `shown` names it in reports.
  SaveReport write(const fs::path& dir, const fs::path& shown, const Options& options, const State& st);
  void wait_for_shards(const fs::path& dir, const Options& options, const State& st);
  void join() {
    if (writer.joinable()) writer.join();
  }
};

}  // namespace saker::ckpt
