// Checksums pieces in order on a helper thread while the caller reads the next ones.
//
// Why: on load, xxh3 of a piece costs about a tenth of reading it (20 GB/s against 1.5-2
// GB/s from disk); done inline, that tenth is added to every load. While the caller
// waits in pread for the next piece, the helper hashes the previous one (still in L3),
// so the hash leaves the critical path even on one free core.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/hash.hpp"

namespace saker::ckpt {

class HashBehind {
 public:
  HashBehind();
  ~HashBehind();  // waits for queued pieces, then stops the helper
  HashBehind(const HashBehind&) = delete;
  HashBehind& operator=(const HashBehind&) = delete;

  // Starts a new checksum (the previous one must have been taken with digest()).
  void reset();
  // Queues [p, p + n): the bytes must stay valid and unchanged until hashed. `then` runs
  // on the helper right after (e.g. dropping the piece's page cache, off the reader's path).
  void add(const std::byte* p, std::size_t n, std::function<void()> then = {});
  // Queues work that needs no hashing, in order with the pieces.
  void run(std::function<void()> task) { add(nullptr, 0, std::move(task)); }
  // Waits until at most `pieces` queued pieces are not yet hashed (0: all of them);
  // afterwards the buffers of every other piece may be reused or freed.
  void wait_until_pending(std::size_t pieces);
  // Waits for every piece and returns the XXH3-128 of all bytes added since reset().
  hash::Digest128 digest();

 private:
  struct Piece {
    const std::byte* p;
    std::size_t n;
    std::function<void()> then;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Piece> queue_;
  bool busy_ = false;  // the helper is hashing a piece it took off the queue
  bool stop_ = false;
  std::optional<hash::Xxh3Stream> sum_;  // touched by the helper only while busy_, by callers only when idle
  std::thread helper_;
};

}  // namespace saker::ckpt
