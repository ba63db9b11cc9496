// The node's shared-memory barrier when a peer is late by far more than its spin budget:
// the waiting rank sleeps on the late peer's futex word instead of yielding in a loop, so
// on a node with more runnable threads than CPUs it leaves the CPU to the peer's compute.
#include <catch2/catch.hpp>

#include <sched.h>
#include <time.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm_alltoall_support.hpp"
#include "launcher/comm/shm.hpp"

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

TEST_CASE("shm barrier: past its spin, a waiter with a CPU of its own polls a while, then yields, then sleeps",
          "[comm][shm][spin]") {
  // Holding is for a waiter that may have a CPU of its own and whose peer runs elsewhere.
  CHECK(wait_step(0, true) == WaitStep::pause);
  CHECK(wait_step(49'000, true) == WaitStep::pause);
  CHECK(wait_step(51'000, true) == WaitStep::yield);
  CHECK(wait_step(0, false) == WaitStep::yield);  // the peer may be queued on this CPU
  CHECK(wait_step(999'000, false) == WaitStep::yield);
  CHECK(wait_step(1'001'000, true) == WaitStep::sleep);
  CHECK(wait_step(1'001'000, false) == WaitStep::sleep);
}

TEST_CASE("shm barrier: a rank with a CPU of its own keeps it while a peer on another CPU is briefly late",
          "[comm][shm][spin]") {
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  if (cpus.size() < 2) {
    WARN("one usable CPU: ranks cannot each have their own; nothing to check");
    return;
  }
  constexpr int kCalls = 64;
  constexpr auto kLate = std::chrono::microseconds(15);  // past the first spins, well inside the hold
  BarrierWaits waits;
  const auto pin = [&](int r) {  // rank r on CPU cpus[r] alone, as taskset or --cpu-bind would
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<std::size_t>(r)], &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  };
  run_ranks(2, [&](Communicator& c, Failures& f) {
    const BarrierWaits before = barrier_waits_this_thread();
    for (int call = 0; call < kCalls; ++call) {
      if (c.rank() == 1)  // late by a busy wait: a sleep would add the timer's slack
        for (const auto until = std::chrono::steady_clock::now() + kLate; std::chrono::steady_clock::now() < until;) {
        }
      std::int64_t v[4] = {c.rank() + 1, 1, 2, call};
      c.allreduce(v, 4, DataType::i64);  // small: one barrier through the segment
      if (v[0] != 3 || v[3] != 2 * call) f.add("rank " + std::to_string(c.rank()) + ", call " + std::to_string(call) + ": wrong sum");
    }
    const BarrierWaits after = barrier_waits_this_thread();
    if (c.rank() == 0)
      waits = {after.short_waits - before.short_waits, after.short_waits_yielded - before.short_waits_yielded};
  }, quick_options(), nodes_for(Transport::shm, 2), pin);
  // Counted by the ranks' arrival times, so only waits the hold could cover: the peer came
  // within it. A load that delays rank 1 past it leaves fewer, and a count this low says
  // nothing either way.
  INFO("rank 0: " << waits.short_waits << " short waits, " << waits.short_waits_yielded << " of them yielded its CPU");
  if (waits.short_waits < 8) {
    WARN("rank 1 was rarely on time (the machine is loaded): too few short waits to judge");
    return;
  }
  // Yielding would hand rank 0's CPU to another process (the peer cannot run there), which
  // may keep it for a time slice. The barrier before the hold yielded in every such wait.
  REQUIRE(waits.short_waits_yielded * 4 <= waits.short_waits);
}
