// One rank of the multi-process comm tests under real srun: bootstraps with
// Communicator::from_environment, checks allreduce/broadcast/fusion results, and
// with SAKER_SELFTEST_KILL_RANK=r makes rank r die mid-allreduce.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "saker/comm.hpp"

using namespace saker::comm;

int main() {
  try {
    auto c = Communicator::from_environment();
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
    std::printf("comm-selftest %s rank %d of %d local %d/%d nodes %d transport %s\n", ok ? "ok" : "WRONG", c->rank(), n,
                c->local_rank(), c->local_size(), c->node_count(), name_of(c->transport()));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm-selftest error: %s\n", e.what());
    return 1;
  }
}
