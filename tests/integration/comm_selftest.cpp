// One rank of the multi-process comm tests under real srun: bootstraps with
// Communicator::from_environment, checks allreduce/broadcast/fusion results, and
// with SAKER_SELFTEST_KILL_RANK=r makes rank r die mid-allreduce.
// SAKER_SELFTEST_UNTIL=FILE (tests/integration/zero_trust_attacks.sh) keeps allreducing
// known values, checking every result bitwise, until FILE exists (see zt_loop).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "saker/comm.hpp"

using namespace saker::comm;

// Rank 0 puts these bytes at every 4096th element (rank >0 puts zeros), so the sum
// carries them too: a capture of the wire finds them unless the transit is encrypted.
constexpr char kPattern[] = "ZT-KNOWN-TENSOR-PATTERN-0123456";  // 32 bytes with the NUL

std::int32_t zt_value(int rank, int iter, std::size_t j) {
  if (j % 4096 < 8) {
    std::int32_t marker = 0;
    std::memcpy(&marker, kPattern + (j % 4096) * 4, 4);
    return rank == 0 ? marker : 0;
  }
  return static_cast<std::int32_t>(((static_cast<std::uint32_t>(j) * 2654435761u) ^ (static_cast<std::uint32_t>(iter) * 40503u)) &
                                    0x00ffffffu) + rank;
}

// Allreduces known values on the user channel and through fusion each iteration, checks
// every element bitwise, until FILE exists on rank 0 (all ranks agree through a max
// allreduce) or SAKER_SELFTEST_MAX_ITERS. Prints one line per rank.
int zt_loop(Communicator& c, const char* until) {
  const int n = c.size(), r = c.rank();
  const long max_iters = std::getenv("SAKER_SELFTEST_MAX_ITERS") ? std::atol(std::getenv("SAKER_SELFTEST_MAX_ITERS")) : 100000;
  const std::size_t count = 1u << 16;
  std::vector<std::int32_t> v(count), want(count);
  long iter = 0;
  for (;; ++iter) {
    const int i = static_cast<int>(iter);
    for (std::size_t j = 0; j < count; ++j) {
      v[j] = zt_value(r, i, j);
      want[j] = 0;
      for (int q = 0; q < n; ++q) want[j] += zt_value(q, i, j);
    }
    c.allreduce(v.data(), count, DataType::i32);
    std::int32_t fused[4] = {i, r, 7, -i}, fused_want[4] = {i * n, n * (n - 1) / 2, 7 * n, -i * n};
    c.enqueue_allreduce("zt-" + std::to_string(i % 4), fused, 4, DataType::i32).wait();
    const bool ok = std::memcmp(v.data(), want.data(), count * sizeof(std::int32_t)) == 0 &&
                    std::memcmp(fused, fused_want, sizeof fused) == 0;
    if (!ok) {
      std::size_t j = 0;
      while (j < count && v[j] == want[j]) ++j;
      std::printf("comm-selftest zt WRONG rank %d iteration %ld element %zu\n", r, iter, j);
      std::fflush(stdout);
      return 1;
    }
    std::int32_t stop = r == 0 && access(until, F_OK) == 0 ? 1 : 0;
    if (iter + 1 >= max_iters) stop = 1;
    c.allreduce(&stop, 1, DataType::i32, ReduceOp::max);
    if (stop) break;
  }
  std::printf("comm-selftest zt ok rank %d of %d iterations %ld transport %s\n", r, n, iter + 1, name_of(c.transport()));
  std::fflush(stdout);
  return 0;
}

int main() {
  try {
    auto c = Communicator::from_environment();
    if (const char* until = std::getenv("SAKER_SELFTEST_UNTIL")) return zt_loop(*c, until);
    int n = c->size();
    const char* kill_rank = std::getenv("SAKER_SELFTEST_KILL_RANK");
    if (kill_rank) {
      std::vector<float> big(4u << 20, 1.0f);
      if (std::atoi(kill_rank) == c->rank())
        std::thread([] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); kill(getpid(), SIGKILL); }).detach();
      for (int i = 0; i < 100000; ++i) c->allreduce(big.data(), big.size(), DataType::f32);
      return 0;
    }
    std::vector<double> v(100003, c->rank() + 1.0);
    c->allreduce(v.data(), v.size(), DataType::f64);
    std::vector<std::int32_t> w(7, c->rank());
    c->allreduce(w.data(), w.size(), DataType::i32, ReduceOp::max);
    char msg[16] = "xxxxxxxxxxxxxxx";
    if (c->rank() == n - 1) std::snprintf(msg, sizeof msg, "from-last");
    c->broadcast(msg, sizeof msg, n - 1);
    float a = 1.0f;
    Handle h = c->enqueue_allreduce("grad", &a, 1, DataType::f32);
    h.wait();
    bool ok = v.back() == n * (n + 1) / 2.0 && w[6] == n - 1 && std::string(msg) == "from-last" && a == n;
    std::printf("comm-selftest %s rank %d of %d local %d/%d nodes %d transport %s transit %s\n", ok ? "ok" : "WRONG",
                c->rank(), n, c->local_rank(), c->local_size(), c->node_count(), name_of(c->transport()),
                name_of(c->options().transit));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm-selftest error: %s\n", e.what());
    return 1;
  }
}
