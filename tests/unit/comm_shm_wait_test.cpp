// The node's shared-memory barrier when a peer is late by far more than its spin budget:
// the waiting rank sleeps on the late peer's futex word instead of yielding in a loop, so
// on a node with more runnable threads than CPUs it leaves the CPU to the peer's compute.
#include <catch2/catch.hpp>

#include <time.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm_alltoall_support.hpp"

using namespace saker::comm;
using namespace saker::comm::test;

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

TEST_CASE("shm barrier: a rank waiting for a late peer sleeps, and wakes with the right sum", "[comm][shm][spin]") {
  constexpr int kCalls = 6;
  constexpr std::size_t kCount = std::size_t{1} << 18;  // 2 MiB: the node's segment, not a small-sum path
  constexpr auto kLate = std::chrono::milliseconds(40);  // far above the spin budget's cap and the 1 ms yield phase
  double waiter_cpu = -1, waited = -1;
  run_ranks(2, [&](Communicator& c, Failures& f) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    for (int call = 0; call < kCalls; ++call) {
      if (c.rank() == 1) std::this_thread::sleep_for(kLate);
      std::vector<std::int64_t> v(kCount, c.rank() + 1);
      v.back() = call;
      c.allreduce(v.data(), v.size(), DataType::i64);
      if (v.front() != 3 || v[kCount / 2] != 3 || v.back() != 2 * call)
        f.add("rank " + std::to_string(c.rank()) + ", call " + std::to_string(call) + ": wrong sum " + std::to_string(v.front()));
    }
    if (c.rank() == 0) {
      waiter_cpu = thread_cpu_seconds() - cpu0;
      waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }, quick_options(), nodes_for(Transport::shm, 2));
  INFO("rank 0 waited " << waited << " s for its late peer and used " << waiter_cpu << " s of CPU meanwhile");
  REQUIRE(waited >= 0.9 * kCalls * std::chrono::duration<double>(kLate).count());
  // A yield loop keeps the waiter runnable for the whole wait: on an idle core it uses
  // about all of it (a load can only lower that). A sleeping waiter uses a few percent.
  REQUIRE(waiter_cpu < 0.3 * waited);
}
