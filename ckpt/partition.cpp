#include "ckpt/partition.hpp"

#include "common/error.hpp"

namespace saker::ckpt {

Slice even_slice(std::uint64_t global_rows, std::uint32_t rank, std::uint32_t world_size) {
  SAKER_ASSERT(world_size > 0 && rank < world_size, "rank within world size");
  // 128-bit products: global_rows * rank cannot overflow.
  const auto cut = [&](std::uint64_t r) {
    return static_cast<std::uint64_t>(static_cast<unsigned __int128>(global_rows) * r / world_size);
  };
  return {global_rows, cut(rank), cut(rank + 1) - cut(rank)};
}

Slice slice_for(const Tensor& tensor, std::uint32_t rank, std::uint32_t world_size) {
  if (tensor.shape.empty())
    throw Error(explain("tensor " + tensor.name + " is partitioned but is a scalar",
                        "partitioned tensors are split along dimension 0", "mark it replicated"));
  const std::uint64_t global = tensor.global_rows != 0 ? tensor.global_rows : tensor.shape[0] * world_size;
  const Slice s = even_slice(global, rank, world_size);
  if (s.rows != tensor.shape[0])
    throw Error(explain("tensor " + tensor.name + " on rank " + std::to_string(rank) + " has " +
                            std::to_string(tensor.shape[0]) + " rows",
                        "an even split of " + std::to_string(global) + " rows over " + std::to_string(world_size) +
                            " ranks gives this rank " + std::to_string(s.rows) + " rows (from row " +
                            std::to_string(s.first_row) + ")",
                        "split partitioned tensors as rows [r*n/W, (r+1)*n/W) and set Tensor::global_rows"));
  return s;
}

}  // namespace saker::ckpt
