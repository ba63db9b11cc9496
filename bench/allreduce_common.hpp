// Shared by the allreduce benchmark and its peer programs (OpenMPI, Gloo) so that all
// three time exactly the same thing: in-place fp32 sum of the same sizes, the same
// warm-up (100 ms, then two calls per size), the same number of timed blocks of the same number of calls, a barrier
// before each block; rank 0 prints "bytes median min max" (seconds per call over the
// blocks) for each size, or "bytes wrong" when the first result is not np.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

// BENCH_SIZES="4096,67108864": the sizes the driver asked for (its --sizes), or none.
inline std::vector<std::size_t> sizes_from_env() {
  std::vector<std::size_t> s;
  if (const char* e = std::getenv("BENCH_SIZES"); e && *e) {
    for (const char* p = e; *p;) {
      char* end = nullptr;
      s.push_back(std::strtoull(p, &end, 10));
      p = *end ? end + 1 : end;
    }
  }
  return s;
}

inline std::vector<std::size_t> sizes() {
  std::vector<std::size_t> s = sizes_from_env();
  if (!s.empty()) return s;
  for (std::size_t b = 4096; b <= (256u << 20); b *= 4) s.push_back(b);
  return s;
}

constexpr int kBlocks = 7;  // the median of 7 blocks; min and max show the spread
// Calls per block: enough for a stable figure, few enough to keep `make bench` short.
inline int calls_per_block(std::size_t bytes) {
  std::size_t total = (512u << 20) / bytes;
  return static_cast<int>(std::clamp<std::size_t>(total / kBlocks, 1, 100));
}

// run(): one in-place allreduce of buf; barrier(): the peer's own barrier.
template <class Run, class Barrier>
void measure(int rank, int np, Run run, Barrier barrier) {
  // Keep every rank busy for 100 ms before timing anything: the smallest size is
  // otherwise timed within milliseconds of the processes' start, while the kernel may
  // still have both ranks on one core (seen here: a whole 4 KiB run 3.5x slower).
  // Rank 0 says when to stop through the allreduce itself, so all ranks agree.
  std::vector<float> go(1);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  do {
    go[0] = rank == 0 && std::chrono::steady_clock::now() < until ? 1.0f : 0.0f;
    run(go);
  } while (go[0] > 0);
  for (std::size_t bytes : sizes()) {
    std::vector<float> buf(bytes / 4, 1.0f);
    run(buf);
    bool ok = buf.empty() || (buf.front() == float(np) && buf.back() == float(np));
    run(buf);  // second warm-up call
    int k = calls_per_block(bytes);
    std::vector<double> t;
    for (int b = 0; b < kBlocks; ++b) {
      barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < k; ++i) run(buf);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / k);
    }
    std::sort(t.begin(), t.end());
    if (rank != 0) continue;
    if (!ok) std::printf("%zu wrong\n", bytes);
    else std::printf("%zu %.9f %.9f %.9f\n", bytes, t[t.size() / 2], t.front(), t.back());
    std::fflush(stdout);
  }
}

}  // namespace bench
