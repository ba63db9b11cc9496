// The SHA-256 of a loaded checkpoint's main file, taken after the load returns (issue 30).
//
// Why: provenance names a loaded checkpoint by the SHA-256 of its main file. Taken in the
// load's own read pass (f0d63fc), it held every resumed load back 1.7-2.1x: SHA-256 runs at
// about a tenth of xxh3's speed, and the load waited for it before it could return. Now a
// thread hashes the file once the load has returned, while training starts; the next save
// that records the parent waits for it. The price is a second read of the main file, off
// the load's path (from the page cache when it was kept, from disk when dropped).
//
// The same file or none: the thread reads through a duplicate of the very descriptor the
// load read the tensors from, so a file renamed or swapped in under the loaded name is never
// hashed. A file changed in place (the same inode written) between the load's first read and
// the hash's end gives no digest (its size or mtime moved, or its ctime with its link count
// unchanged: a rename over the name or an unlink moves ctime too): fail closed, the
// checkpoint is then named as no one's parent, rather than by bytes that were not loaded.
// Not seen: a writer who also sets mtime back and unlinks the name; that is the file's
// owner, whose job can write any record anyway.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace saker::ckpt {

class ParentDigest {
 public:
  // Duplicates fd (the caller keeps its own) and notes the file's size and change times;
  // call it before the load reads. Never throws: a descriptor that cannot be duplicated or
  // examined gives no digest (result() says why), never a load that fails for it.
  ParentDigest(int fd, std::string file, bool drop_behind);
  ~ParentDigest();  // stops a hash in progress (a refused or unused load), then closes the descriptor
  ParentDigest(const ParentDigest&) = delete;
  ParentDigest& operator=(const ParentDigest&) = delete;

  // Begins hashing on a thread, from the file's first byte to its end (call once).
  void start();
  // Waits for the hash: the 64 hex digits, or nullopt with *why saying what went wrong
  // (a read error, a file changed since the load, a hash never started).
  std::optional<std::string> result(std::string* why);
  // Bytes the thread has read so far (tests).
  std::uint64_t bytes_read() const { return read_.load(); }
  const std::string& file() const { return file_; }

 private:
  void run();

  int fd_ = -1;
  std::string file_;
  bool drop_behind_;
  struct stat before_ {};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> read_{0};
  bool started_ = false, joined_ = false;
  std::optional<std::string> digest_;
  std::string why_;
};

namespace internal {
// Tests only (no option, file or environment variable reaches it): while held, digest
// threads wait before reading, so a test can see that a load returns without its digest.
void hold_parent_digests_for_test(bool hold);
}  // namespace internal

}  // namespace saker::ckpt
