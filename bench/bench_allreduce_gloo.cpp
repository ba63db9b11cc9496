// Gloo peer for bench_allreduce: ring_chunked allreduce over Gloo's TCP transport.
// Rendezvous through a FileStore directory; rank/size from SAKER_RANK/SAKER_WORLD_SIZE.
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>

#include "bench/allreduce_common.hpp"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int rank = std::atoi(std::getenv("SAKER_RANK")), size = std::atoi(std::getenv("SAKER_WORLD_SIZE"));
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[1]);
  gloo::rendezvous::PrefixStore prefix("bench", store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(prefix, dev);
  for (std::size_t bytes : bench::sizes()) {
    std::vector<float> buf(bytes / 4, 1.0f);
    std::vector<float*> ptrs{buf.data()};
    gloo::AllreduceRingChunked<float> algo(ctx, ptrs, static_cast<int>(buf.size()));
    gloo::BarrierAllToOne barrier(ctx);
    int iters = bench::iterations(bytes);
    for (int i = 0; i < 2; ++i) algo.run();
    barrier.run();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) algo.run();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    if (rank == 0) std::printf("%zu %.9f\n", bytes, t);
  }
}
