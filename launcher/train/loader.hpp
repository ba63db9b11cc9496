// A deterministic data loader: every epoch visits the rows in a permutation drawn from
// (seed, epoch), in global batches of B rows; part p of P takes rows [p*B/P, (p+1)*B/P)
// of each global batch. saker-train's parts are its logical workers (--logical-ranks),
// not its ranks, so a worker reads the same rows whichever rank computes it. The cursor (epoch, position) is all the state there is, so
// saving and restoring it resumes the exact sequence of batches. Incomplete final
// batches are dropped so every step sees exactly B rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace saker::train {

struct Cursor {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;  // rows of this epoch's permutation already consumed
  std::vector<std::byte> save() const;  // 16 bytes
  // Throws saker::Error when the bytes are not a saved cursor.
  static Cursor restore(const std::vector<std::byte>& bytes);
  bool operator==(const Cursor&) const = default;
};

class Loader {
 public:
  // Throws saker::Error when B is not in [P, rows] (every part needs at least one row).
  Loader(int rows, int global_batch, int part, int parts, std::uint64_t seed);
  // Part `part`'s row indices of the next global batch; advances the cursor.
  std::vector<std::uint32_t> next();
  // The row indices of parts [first, first + count) of the next global batch, in part
  // order; advances the cursor once.
  std::vector<std::vector<std::uint32_t>> next_parts(int first, int count);
  const Cursor& cursor() const { return cursor_; }
  void set_cursor(const Cursor& c);
  int steps_per_epoch() const { return rows_ / batch_; }

 private:
  void shuffle_for(std::uint64_t epoch);

  int rows_, batch_, rank_, world_;
  std::uint64_t seed_;
  Cursor cursor_;
  std::uint64_t permuted_epoch_ = UINT64_MAX;
  std::vector<std::uint32_t> order_;
};

}  // namespace saker::train
