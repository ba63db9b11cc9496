// Shared by bench_collectives (Saker) and bench_collectives_mpi (OpenMPI) so that both
// time the same thing: reduce-scatter, alltoall and allgather of fp32 buffers of the same
// total sizes, the same warm-up (two calls per size), 7 timed blocks of the same number of
// calls with a barrier before each. Rank 0 prints one line per op and size:
//   OP BYTES MEDIAN_S MIN_S MAX_S BUSBW_GBPS
// BYTES is the whole buffer (reduce-scatter's input, alltoall's send side, allgather's
// output), and busbw = BYTES * (np-1)/np / median, as nccl-tests define it for the three.
// Results are checked once per op and size (exact small integers); "OP BYTES wrong" then.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/allreduce_common.hpp"  // sizes_from_env

namespace bench {

// BENCH_SIZES="1048576,4194304" restricts the sizes.
inline std::vector<std::size_t> collective_sizes() {
  if (std::vector<std::size_t> s = sizes_from_env(); !s.empty()) return s;
  return {1u << 20, 4u << 20, 16u << 20, 64u << 20};
}

// One op: run(send, recv) with send and recv sized by the op (elements of fp32).
struct Op {
  std::string name;
  std::size_t send_elems, recv_elems;
  std::function<void(const float*, float*)> run;
  std::function<bool(const std::vector<float>&)> right;  // the first call's recv
};

// Ops for n ranks at a total of `bytes`: rank r's send holds r+1 everywhere.
inline std::vector<Op> ops_at(std::size_t bytes, int np, std::function<void(const float*, float*, std::size_t)> rs,
                              std::function<void(const float*, float*, std::size_t)> a2a,
                              std::function<void(const float*, float*, std::size_t)> ag) {
  const std::size_t total = bytes / 4, part = total / static_cast<std::size_t>(np);
  const float sum = static_cast<float>(np * (np + 1) / 2);
  std::vector<Op> ops;
  ops.push_back({"reduce_scatter", part * static_cast<std::size_t>(np), part,
                 [rs, part](const float* s, float* r) { rs(s, r, part); },
                 [sum](const std::vector<float>& r) { return std::all_of(r.begin(), r.end(), [&](float x) { return x == sum; }); }});
  ops.push_back({"alltoall", part * static_cast<std::size_t>(np), part * static_cast<std::size_t>(np),
                 [a2a, part](const float* s, float* r) { a2a(s, r, part); },
                 [part](const std::vector<float>& r) {
                   for (std::size_t i = 0; i < r.size(); ++i)
                     if (r[i] != static_cast<float>(i / part + 1)) return false;
                   return true;
                 }});
  ops.push_back({"allgather", part, part * static_cast<std::size_t>(np),
                 [ag, part](const float* s, float* r) { ag(s, r, part); },
                 [part](const std::vector<float>& r) {
                   for (std::size_t i = 0; i < r.size(); ++i)
                     if (r[i] != static_cast<float>(i / part + 1)) return false;
                   return true;
                 }});
  return ops;
}

inline int collective_calls_per_block(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((256u << 20) / bytes / 7, 1, 50));
}

// rs(send, recv, part): reduce-scatter of np*part into part; a2a(send, recv, part): part
// elements to and from each rank; ag(send, recv, part): part from each rank.
template <class Barrier>
void measure_collectives(int rank, int np, std::function<void(const float*, float*, std::size_t)> rs,
                         std::function<void(const float*, float*, std::size_t)> a2a,
                         std::function<void(const float*, float*, std::size_t)> ag, Barrier barrier) {
  for (std::size_t bytes : collective_sizes()) {
    for (Op& op : ops_at(bytes, np, rs, a2a, ag)) {
      std::vector<float> send(op.send_elems, static_cast<float>(rank + 1)), recv(op.recv_elems, -1.0f);
      op.run(send.data(), recv.data());
      bool ok = op.right(recv);
      op.run(send.data(), recv.data());
      const int k = collective_calls_per_block(bytes);
      std::vector<double> t;
      for (int b = 0; b < 7; ++b) {
        barrier();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < k; ++i) op.run(send.data(), recv.data());
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / k);
      }
      std::sort(t.begin(), t.end());
      if (rank != 0) continue;
      const std::size_t moved = (op.name == "allgather" ? op.recv_elems : op.send_elems) * 4;
      if (!ok) std::printf("%s %zu wrong\n", op.name.c_str(), moved);
      else
        std::printf("%s %zu %.9f %.9f %.9f %.3f\n", op.name.c_str(), moved, t[3], t.front(), t.back(),
                    static_cast<double>(moved) * (np - 1) / np / t[3] / 1e9);
      std::fflush(stdout);
    }
  }
}

}  // namespace bench
