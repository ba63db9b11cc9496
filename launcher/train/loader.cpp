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

Loader::Loader(int rows, int global_batch, int rank, int world, std::uint64_t seed)
    : rows_(rows), batch_(global_batch), rank_(rank), world_(world), seed_(seed) {
  if (global_batch < world || global_batch > rows) {
    throw Error(explain("global batch " + std::to_string(global_batch) + " for " + std::to_string(world) +
                            " ranks and " + std::to_string(rows) + " rows",
                        "each rank needs at least one row and a batch cannot exceed the dataset",
                        "pass --batch between the world size and the number of rows"));
  }
  SAKER_ASSERT(rank >= 0 && rank < world, "rank outside the world");
}

void Loader::shuffle_for(std::uint64_t epoch) {
  if (permuted_epoch_ == epoch) return;
  order_.resize(rows_);
  std::iota(order_.begin(), order_.end(), 0u);
  Rng rng = Rng::derived(seed_, 0xda7a0000ULL + epoch);
  for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(i + 1)]);
  permuted_epoch_ = epoch;
}

std::vector<std::uint32_t> Loader::next() {
  if (cursor_.position + batch_ > static_cast<std::uint64_t>(rows_)) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
  shuffle_for(cursor_.epoch);
  const std::uint64_t begin = cursor_.position + static_cast<std::uint64_t>(batch_) * rank_ / world_;
  const std::uint64_t end = cursor_.position + static_cast<std::uint64_t>(batch_) * (rank_ + 1) / world_;
  std::vector<std::uint32_t> rows(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                                  order_.begin() + static_cast<std::ptrdiff_t>(end));
  cursor_.position += batch_;
  return rows;
}

void Loader::set_cursor(const Cursor& c) {
  if (c.position > static_cast<std::uint64_t>(rows_)) {
    throw Error(explain("data cursor at row " + std::to_string(c.position), "it is past the dataset's " +
                        std::to_string(rows_) + " rows", "resume with the dataset the checkpoint was trained on"));
  }
  cursor_ = c;
}

}  // namespace saker::train
