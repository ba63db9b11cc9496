// Alpha-beta model of allreduce for bench_allreduce: a message of m bytes over one
// link costs alpha + m*beta. The model is fitted to the two-rank measurements of one
// transport, checked against the 3- and 4-rank ones, then used to predict large
// clusters for the algorithms a design could pick:
//   ring                      2(P-1) steps, 2(P-1)/P * N bytes per rank
//   recursive halving/doubling (Rabenseifner)  2 log2(P) steps, 2(P-1)/P * N bytes
//   binary tree (reduce, then broadcast)       2 log2(P) steps, 2 log2(P) * N bytes
//   hierarchical: shared memory inside a node, the ring among node leaders, then a
//   shared-memory broadcast (costed as one more shared-memory allreduce, an upper bound).
// Local "nodes" share this machine's cores: with P ranks on C cores every rank gets
// C/P of a core, which the local validation models by scaling the bandwidth term by
// max(1, P/C); a cluster node has a core per rank, so the predictions leave it out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <vector>

namespace bench::model {

struct Fit {
  double alpha = NAN, beta = NAN;  // seconds, seconds per byte
  bool ok() const { return std::isfinite(alpha) && std::isfinite(beta); }
};

inline double ring_steps(int p) { return 2.0 * (p - 1); }
inline double ring_volume(int p) { return 2.0 * (p - 1) / p; }
inline double log2_ceil(int p) { return std::ceil(std::log2(static_cast<double>(p))); }

inline double ring(const Fit& f, int p, double n) {
  return p < 2 ? 0 : ring_steps(p) * f.alpha + ring_volume(p) * n * f.beta;
}
inline double halving_doubling(const Fit& f, int p, double n) {
  return p < 2 ? 0 : 2 * log2_ceil(p) * f.alpha + ring_volume(p) * n * f.beta;
}
inline double tree(const Fit& f, int p, double n) {
  return p < 2 ? 0 : 2 * log2_ceil(p) * (f.alpha + n * f.beta);
}
// nodes nodes of `local` ranks each: shm allreduce + ring of leaders + shm broadcast.
inline double hierarchical(const Fit& net, const Fit& shm, int nodes, int local, double n) {
  return 2 * ring(shm, local, n) + ring(net, nodes, n);
}
inline double sharing(int ranks, int cores) { return std::max(1.0, static_cast<double>(ranks) / cores); }

// The fit, from two-rank times t2(N): alpha is half the smallest size's time (two
// latency-bound steps), beta(N) = (t2(N) - 2 alpha) / N for each measured size. One
// straight line through 4 KiB..256 MiB does not fit (residuals of 20-45% here): the
// cost per byte changes with size as buffers leave the caches and TCP's windows grow.
// So beta is kept per size class, and what the 3- and 4-rank runs check is the scaling
// law: steps, volume and shared cores.
struct PerSize {
  double alpha = NAN;
  std::map<double, double> beta;  // bytes -> seconds per byte
  bool ok() const { return std::isfinite(alpha) && !beta.empty(); }
  Fit at(double n) const {  // the nearest measured size (log scale)
    Fit f{alpha, NAN};
    double best = INFINITY;
    for (auto [b, v] : beta)
      if (double d = std::fabs(std::log(b / n)); d < best) { best = d; f.beta = v; }
    return f;
  }
};

inline PerSize fit_per_size(const std::map<double, double>& two_rank_seconds) {
  PerSize m;
  if (two_rank_seconds.empty()) return m;
  m.alpha = two_rank_seconds.begin()->second / ring_steps(2);
  for (auto [n, t] : two_rank_seconds) m.beta[n] = std::max(0.0, t - ring_steps(2) * m.alpha) / (ring_volume(2) * n);
  return m;
}

// Local validation: the bandwidth term scales with how many ranks share each core (the
// copies are CPU work); latency does not (a waiting rank needs no core).
inline double ring_local(const Fit& f, int p, double n, int cores) {
  return p < 2 ? 0 : ring_steps(p) * f.alpha + ring_volume(p) * n * f.beta * sharing(p, cores);
}

}  // namespace bench::model
