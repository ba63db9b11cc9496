#include "launcher/train/loader.hpp"

#include <cstring>
#include <numeric>

#include "common/error.hpp"
#include "launcher/train/rng.hpp"

namespace saker::train {

std::vector<std::byte> Cursor::save() const {
  std::vector<std::byte> out(16);
  std::memcpy(out.data(), &epoch, 8);
  std::memcpy(out.data() + 8, &position, 8);
  return out;
}

Cursor Cursor::restore(const std::vector<std::byte>& bytes) {
  if (bytes.size() != 16) {
    throw Error(explain("data cursor of " + std::to_string(bytes.size()) + " bytes",
                        "saker-train saves 16 bytes (epoch, position)", "resume from a checkpoint written by saker-train"));
  }
  Cursor c;
  std::memcpy(&c.epoch, bytes.data(), 8);
  std::memcpy(&c.position, bytes.data() + 8, 8);
  return c;
}

Loader::Loader(int rows, int global_batch, int part, int parts, std::uint64_t seed)
    : rows_(rows), batch_(global_batch), rank_(part), world_(parts), seed_(seed) {
  if (global_batch < parts || global_batch > rows) {
    throw Error(explain("global batch " + std::to_string(global_batch) + " for " + std::to_string(parts) +
                            " logical workers and " + std::to_string(rows) + " rows",
                        "each logical worker needs at least one row and a batch cannot exceed the dataset",
                        "pass --batch between the number of logical workers (--logical-ranks, by default the "
                        "first world size) and the number of rows"));
  }
  SAKER_ASSERT(part >= 0 && part < parts, "part outside the batch");
}

void Loader::shuffle_for(std::uint64_t epoch) {
  if (permuted_epoch_ == epoch) return;
  order_.resize(rows_);
  std::iota(order_.begin(), order_.end(), 0u);
  Rng rng = Rng::derived(seed_, 0xda7a0000ULL + epoch);
  for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(i + 1)]);
  permuted_epoch_ = epoch;
}

std::vector<std::uint32_t> Loader::next() { return std::move(next_parts(rank_, 1)[0]); }

std::vector<std::vector<std::uint32_t>> Loader::next_parts(int first, int count) {
  SAKER_ASSERT(first >= 0 && count >= 0 && first + count <= world_, "parts outside the batch");
  if (cursor_.position + batch_ > static_cast<std::uint64_t>(rows_)) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
  shuffle_for(cursor_.epoch);
  std::vector<std::vector<std::uint32_t>> out;
  for (int p = first; p < first + count; ++p) {
    const std::uint64_t begin = cursor_.position + static_cast<std::uint64_t>(batch_) * p / world_;
    const std::uint64_t end = cursor_.position + static_cast<std::uint64_t>(batch_) * (p + 1) / world_;
    out.emplace_back(order_.begin() + static_cast<std::ptrdiff_t>(begin), order_.begin() + static_cast<std::ptrdiff_t>(end));
  }
  cursor_.position += batch_;
  return out;
}

void Loader::set_cursor(const Cursor& c) {
  if (c.position > static_cast<std::uint64_t>(rows_)) {
    throw Error(explain("data cursor at row " + std::to_string(c.position), "it is past the dataset's " +
                        std::to_string(rows_) + " rows", "resume with the dataset the checkpoint was trained on"));
  }
  cursor_ = c;
}

}  // namespace saker::train
