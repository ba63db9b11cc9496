// Even partitioning along dimension 0: rank r of W holds rows [r*n/W, (r+1)*n/W). The same
// rule cuts the slices when saving and re-cuts them when loading with another world size.
#pragma once

#include <cstdint>

#include "saker/ckpt.hpp"

namespace saker::ckpt {

struct Slice {
  std::uint64_t global_rows = 0;
  std::uint64_t first_row = 0;
  std::uint64_t rows = 0;
};

Slice even_slice(std::uint64_t global_rows, std::uint32_t rank, std::uint32_t world_size);

// The slice a partitioned tensor of this rank must be; throws saker::Error (naming the
// tensor, the rows it has and the rows the rule expects) when it is not.
Slice slice_for(const Tensor& tensor, std::uint32_t rank, std::uint32_t world_size);

}  // namespace saker::ckpt
