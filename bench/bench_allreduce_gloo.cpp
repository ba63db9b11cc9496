// Gloo peer for bench_allreduce: ring_chunked allreduce over Gloo's TCP transport on
// 127.0.0.1 (Gloo has no shared-memory transport), with Gloo's default options.
// Rendezvous through a FileStore directory; rank/size from SAKER_RANK/SAKER_WORLD_SIZE.
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdlib>
#include <memory>

#include "bench/allreduce_common.hpp"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int rank = std::atoi(std::getenv("SAKER_RANK")), size = std::atoi(std::getenv("SAKER_WORLD_SIZE"));
  gloo::transport::tcp::attr attr;
  // BENCH_GLOO_ADDR: this rank's address on an emulated wire (bench_allreduce --wire).
  const char* addr = std::getenv("BENCH_GLOO_ADDR");
  attr.hostname = addr && *addr ? addr : "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[1]);
  gloo::rendezvous::PrefixStore prefix("bench", store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(prefix, dev);
  gloo::BarrierAllToOne barrier(ctx);
  // An algorithm instance is bound to one buffer (it registers it with the pairs):
  // build it once per size, outside the timed loop, as Gloo's own benchmark does.
  std::unique_ptr<gloo::AllreduceRingChunked<float>> algo;
  float* bound = nullptr;
  std::size_t bound_n = 0;
  bench::measure(
      rank, size,
      [&](std::vector<float>& b) {
        if (b.data() != bound || b.size() != bound_n) {
          std::vector<float*> ptrs{b.data()};
          algo = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, static_cast<int>(b.size()));
          bound = b.data();
          bound_n = b.size();
        }
        algo->run();
      },
      [&] { barrier.run(); });
}
