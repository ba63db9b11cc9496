// bench_torch_check: what the fusion negotiation's cross-rank check (189ae67, issue 29 §3)
// costs per tensor name per cycle, timed alone in one process, since whole steps on a
// shared machine cannot resolve it (bench/bench_torch.sh --baseline prints their noise).
// One cycle's per-name work on every rank of a 2-rank job, as fusion_cycle.cpp does it:
// encode this rank's pending list, decode both ranks' lists, and take_ready's check (the
// holders' specs gathered and compared, shape included). Timed twice, in interleaved
// blocks: with the shape hvd passes (a 64 MiB fp32 tensor: "16777216") and with none (what
// the check compares without it). The whole of this is an upper bound on what the check
// added: the line before it carried the same fields but the shape, and compared
// count/type/op in place. Prints ns per name for each, and that cost against a 64 MiB
// fused allreduce of T ms (one name a step): bench_torch_check [NAMES] [FUSED_MS].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "launcher/comm/fusion_wire.hpp"

namespace fw = saker::comm::fusion_wire;

namespace {

volatile std::size_t sink;  // keeps the work from being optimised away

// One negotiation cycle's per-name work for `items` on 2 ranks; returns the ready count.
std::size_t cycle(const std::vector<std::pair<std::string, fw::Spec>>& items) {
  const std::set<std::string> expired;
  const std::string text = fw::encode(false, false, items, expired);
  std::vector<fw::RankList> lists;
  for (int r = 0; r < 2; ++r) lists.push_back(fw::decode(text, "rank " + std::to_string(r)));
  std::size_t ready = 0;
  for (const auto& [name, spec] : lists[0].items) {
    std::vector<std::pair<int, fw::Spec>> holders;
    for (int r = 0; r < 2; ++r) {
      auto it = lists[static_cast<std::size_t>(r)].by_name.find(name);
      if (it != lists[static_cast<std::size_t>(r)].by_name.end()) holders.emplace_back(r, it->second);
    }
    const bool same = std::all_of(holders.begin(), holders.end(), [&](const auto& h) { return h.second == spec; });
    if (same && fw::mismatch(name, holders).empty()) ++ready;
  }
  return ready;
}

double ns_per_name(const std::vector<std::pair<std::string, fw::Spec>>& items, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t n = 0;
  for (int i = 0; i < reps; ++i) n += cycle(items);
  sink = n;
  const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
  return d.count() / (static_cast<double>(reps) * static_cast<double>(items.size()));
}

}  // namespace

int main(int argc, char** argv) {
  const int names = argc > 1 ? std::atoi(argv[1]) : 1;
  const double fused_ms = argc > 2 ? std::atof(argv[2]) : 0;
  if (names < 1) {
    std::fprintf(stderr, "bench_torch_check: NAMES must be a positive number (usage: bench_torch_check [NAMES] [FUSED_MS])\n");
    return 2;
  }
  std::vector<std::pair<std::string, fw::Spec>> shaped, bare;
  for (int i = 0; i < names; ++i) {
    const std::string name = "bench.64MiB." + std::to_string(i);
    shaped.emplace_back(name, fw::Spec{16u << 20, 0, 0, "16777216"});
    bare.emplace_back(name, fw::Spec{16u << 20, 0, 0, ""});
  }
  const int reps = std::max(1, 200000 / names);
  std::vector<double> with, without;
  for (int block = 0; block < 9; ++block) {  // interleaved: a busy moment hits both alike
    with.push_back(ns_per_name(shaped, reps));
    without.push_back(ns_per_name(bare, reps));
  }
  std::sort(with.begin(), with.end());
  std::sort(without.begin(), without.end());
  std::printf("negotiation per name per cycle, 2 ranks' lists, %d name(s), 9 blocks of %d cycles\n", names, reps);
  std::printf("  with a shape: median %.0f ns (min %.0f, max %.0f)\n", with[4], with[0], with[8]);
  std::printf("  no shape:     median %.0f ns (min %.0f, max %.0f)\n", without[4], without[0], without[8]);
  if (fused_ms > 0)
    std::printf("  against a %.1f ms fused 64 MiB allreduce (one name a step): %.5f%% of it\n", fused_ms,
                with[4] * 1e-6 / fused_ms * 100);
  return 0;
}
