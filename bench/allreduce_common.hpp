// Shared by the allreduce benchmark and its peer programs (OpenMPI, Gloo) so that all
// three time exactly the same thing: in-place fp32 sum, warm-up, then a timed loop;
// rank 0 prints "bytes seconds_per_call" lines.
#pragma once

#include <cstddef>
#include <cstdio>
#include <vector>

namespace bench {

inline std::vector<std::size_t> sizes() {
  std::vector<std::size_t> s;
  for (std::size_t b = 4096; b <= (256u << 20); b *= 4) s.push_back(b);
  return s;
}
// Enough calls for a stable figure, few enough to keep `make bench` to minutes.
inline int iterations(std::size_t bytes) {
  std::size_t it = (512u << 20) / bytes;
  return static_cast<int>(it < 3 ? 3 : it > 300 ? 300 : it);
}

}  // namespace bench
