// The one thing a saker-train step with --logical-ranks equal to the world size does
// differently from a step before the canonical order: the gradient sum. Times the
// transport's own allreduce (what a step did before) and the canonical-order sum
// (comm::OrderedReduce, what it does now) on the same buffers, interleaved in pairs of
// blocks of alternating order (AB BA AB ...), so that a change in the machine's load falls
// on both; prints the medians, quartiles and the per-pair difference of the time per call.
// Blocks of calls, each started by a barrier, not single calls: a single call's time on
// rank 0 is mostly how long it waited for the last rank to arrive, which the call before
// it decides (two calls in a row: the first waits, the second does not).
//
//   saker-run --local -n RANKS -- bench_train_logical_sum [FLOATS [PAIRS [BLOCK [flat]]]]
//
// FLOATS: the sum's length (default 6536: saker-train's gradient for --features 32
// --layers 64,64 --classes 4, plus its 4 extra values, as bench_train_logical.sh runs it).
// Rank 0 prints one line of figures, "key value" pairs, which bench_train_logical.sh reads.
// With "flat", the first of each pair ("plain") is instead the canonical-order sum over the
// flat TCP ring of every rank (what several nodes of several ranks took before the node
// chain, ordered_nodes.hpp), and the second the default path. Emulate nodes with
// SAKER_NODE_ID, e.g. 2 nodes x 2 ranks:
//   saker-run --local -n 4 -- sh -c 'SAKER_NODE_ID=n$((RANK / 2)) exec bench_train_logical_sum 6536 200 32 flat' 
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "launcher/comm/ordered_reduce.hpp"
#include "saker/comm.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = p * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(h);
  return i + 1 < v.size() ? v[i] + (h - static_cast<double>(i)) * (v[i + 1] - v[i]) : v[i];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 6536;
    const int pairs = argc > 2 ? std::atoi(argv[2]) : 200;
    const int block = argc > 3 ? std::atoi(argv[3]) : 32;
    const bool versus_flat = argc > 4 && std::string(argv[4]) == "flat";
    auto c = saker::comm::Communicator::from_environment();
    saker::comm::OrderedReduce ordered(*c, c->size());  // L = world size, one worker per rank
    std::vector<float> grad(count), out(count), work(count);
    for (std::size_t i = 0; i < count; ++i) grad[i] = static_cast<float>((i * 2654435761u + c->rank()) % 1000) * 1e-3f;
    float* parts[1] = {grad.data()};
    std::unique_ptr<saker::comm::OrderedReduce> flat;
    if (versus_flat) {
      c->set_transport(saker::comm::Transport::ring);  // as SAKER_COMM_TRANSPORT=ring: every rank on the TCP ring
      flat = std::make_unique<saker::comm::OrderedReduce>(*c, c->size());
    }
    auto plain = [&] {
      work = grad;
      if (flat) flat->sum(parts, count, work.data());
      else c->allreduce(work.data(), count, saker::comm::DataType::f32, saker::comm::ReduceOp::sum);
    };
    auto canonical = [&] {
      work = grad;  // the same copy as plain(), so only the sum differs
      ordered.sum(parts, count, out.data());
    };
    auto timed = [&](auto&& f) {  // microseconds per call over one block
      c->barrier();
      const auto t0 = Clock::now();
      for (int k = 0; k < block; ++k) f();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / block;
    };
    for (int i = 0; i < 10; ++i) timed(plain), timed(canonical);  // warm-up: connections, caches, store choices
    std::vector<double> a, b, diff;
    for (int i = 0; i < pairs; ++i) {
      double ta, tb;
      if (i % 2 == 0) ta = timed(plain), tb = timed(canonical);
      else tb = timed(canonical), ta = timed(plain);
      a.push_back(ta), b.push_back(tb), diff.push_back(tb - ta);
    }
    if (c->rank() == 0) {
      std::printf("floats %zu ranks %d path %s pairs %d block %d plain_us %.2f %.2f %.2f canonical_us %.2f %.2f %.2f "
                  "diff_us %.2f %.2f %.2f nodes %d baseline %s\n",
                  count, c->size(),
                  ordered.shm_path() ? "shm" : ordered.chain_path() ? "chain" : ordered.ring_path() ? "ring" : "owner",
                  pairs, block,
                  quantile(a, 0.5), quantile(a, 0.25), quantile(a, 0.75), quantile(b, 0.5), quantile(b, 0.25),
                  quantile(b, 0.75), quantile(diff, 0.5), quantile(diff, 0.25), quantile(diff, 0.75),
                  c->node_count(), flat ? "flat-ring" : "allreduce");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_logical_sum: %s\n", e.what());
    return 1;
  }
}
