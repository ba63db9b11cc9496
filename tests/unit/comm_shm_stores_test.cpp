// StoreChoice: how the shared-memory path picks ordinary or streaming stores from the
// timings of its own calls; SpinBudget: how long its barriers busy-wait.
#include <catch2/catch.hpp>

#include "launcher/comm/shm.hpp"

using saker::comm::StoreChoice;

namespace {

constexpr std::size_t kBytes = 64u << 20;

// Runs `calls` calls, each timed by cost(streaming); returns how many used streaming.
template <class Cost>
int run(StoreChoice& c, int calls, Cost cost, std::size_t bytes = kBytes) {
  int streamed = 0;
  for (int i = 0; i < calls; ++i) {
    bool s = c.streaming(bytes);
    streamed += s ? 1 : 0;
    c.record(bytes, s, cost(s));
  }
  return streamed;
}

}  // namespace

TEST_CASE("stores: a cold first call, then each kind four times in turn") {
  StoreChoice c;
  std::vector<bool> seen;
  for (int i = 0; i < 9; ++i) {
    seen.push_back(c.streaming(kBytes));
    c.record(kBytes, seen.back(), 1.0);
  }
  CHECK(seen == std::vector<bool>{false, false, true, false, true, false, true, false, true});
}

TEST_CASE("stores: the faster kind wins, the other is tried every 32nd call") {
  StoreChoice fast_streaming;
  run(fast_streaming, 9, [](bool s) { return s ? 0.007 : 0.048; });
  CHECK(run(fast_streaming, 64, [](bool s) { return s ? 0.007 : 0.048; }) == 62);
  StoreChoice fast_ordinary;
  run(fast_ordinary, 9, [](bool s) { return s ? 0.011 : 0.0066; });
  CHECK(run(fast_ordinary, 64, [](bool s) { return s ? 0.011 : 0.0066; }) == 2);
}

TEST_CASE("stores: one slow outlier does not switch; a lasting change does within four calls") {
  StoreChoice c;
  run(c, 9, [](bool s) { return s ? 0.011 : 0.0066; });
  int call = 0;
  // A busy moment makes one ordinary call slow: ordinary stays.
  CHECK(run(c, 10, [&](bool s) { return s ? 0.011 : (++call == 3 ? 0.2 : 0.0066); }) <= 1);
  // The ranks move to cores that share no cache: ordinary stores become slow for good.
  run(c, 4, [](bool s) { return s ? 0.0076 : 0.048; });
  CHECK(run(c, 20, [](bool s) { return s ? 0.0076 : 0.048; }) >= 19);
}

TEST_CASE("stores: size classes are judged apart") {
  StoreChoice c;
  run(c, 20, [](bool s) { return s ? 0.007 : 0.048; }, 64u << 20);
  run(c, 20, [](bool s) { return s ? 0.00015 : 0.00005; }, 1u << 20);
  CHECK(c.streaming(64u << 20));
  CHECK_FALSE(c.streaming(1u << 20));
}

// SpinBudget: how long a barrier busy-waits, learnt from how late its peers came. Pure
// arithmetic on the lateness it is told, so these cases time nothing.
using saker::comm::SpinBudget;

namespace {
SpinBudget learnt(std::int64_t cap, std::int64_t late, bool caught, int waits) {
  SpinBudget s(cap);
  for (int i = 0; i < waits; ++i) s.learn(late, caught);
  return s;
}
}  // namespace

TEST_CASE("shm spin budget: twice the lateness that spinning caught, never above the cap", "[comm][shm][spin]") {
  SpinBudget s = learnt(50'000, 2'000, true, 60);
  REQUIRE(s.ns() > 3'900);
  REQUIRE(s.ns() <= 4'000);
  // Lateness near half the cap: the budget approaches the cap and stays under it.
  REQUIRE(learnt(50'000, 25'000, true, 200).ns() <= 50'000);
  REQUIRE(learnt(50'000, 25'000, true, 200).ns() > 49'000);
}

TEST_CASE("shm spin budget: waits the spin missed or that came late never raise it", "[comm][shm][spin]") {
  // A peer that came only after the spin ended (maybe queued behind this member): no growth.
  REQUIRE(learnt(50'000, 1'000, false, 100).ns() == 0);
  SpinBudget s = learnt(50'000, 2'000, true, 60);
  const std::int64_t grown = s.ns();
  for (int i = 0; i < 40; ++i) s.learn(1'000, false);
  REQUIRE(s.ns() < grown / 100);
  // Peers that come later than half the cap (they compute between collectives): decays.
  SpinBudget t = learnt(50'000, 2'000, true, 60);
  for (int i = 0; i < 40; ++i) t.learn(30'000, true);
  REQUIRE(t.ns() < 100);
}

TEST_CASE("shm spin budget: zero where members share CPUs; the last to arrive learns nothing", "[comm][shm][spin]") {
  REQUIRE(learnt(0, 500, true, 100).ns() == 0);
  SpinBudget s = learnt(50'000, 2'000, true, 60);
  const std::int64_t before = s.ns();
  for (int i = 0; i < 10; ++i) s.learn(0, false);
  for (int i = 0; i < 10; ++i) s.learn(-5'000, true);
  REQUIRE(s.ns() == before);
}

namespace {
// A mask of the CPUs listed.
cpu_set_t cpus(std::initializer_list<int> list) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : list) CPU_SET(c, &s);
  return s;
}
}  // namespace

TEST_CASE("shm spin cap: members pinned to a CPU apiece have one each; members confined together do not",
          "[comm][shm][spin]") {
  using saker::comm::own_cpu_each;
  // taskset -c 0 and -c 1 (BENCH_PIN, Slurm's --cpu-bind=cores): each mask holds one CPU,
  // but the two members have two between them. Judged by each member's own mask (the old
  // rule), they got no spin at all.
  REQUIRE(own_cpu_each({cpus({0}), cpus({1})}, 2));
  REQUIRE(own_cpu_each({cpus({0, 1}), cpus({0, 1})}, 2));  // unpinned on a 2-CPU machine
  REQUIRE(own_cpu_each({cpus({3}), cpus({7}), cpus({5})}, 8));
  // Both on one CPU (a 1-CPU cgroup, or taskset -c 0 for both): spinning keeps the peer off it.
  REQUIRE_FALSE(own_cpu_each({cpus({0}), cpus({0})}, 2));
  REQUIRE_FALSE(own_cpu_each({cpus({0, 1}), cpus({0, 1}), cpus({0, 1})}, 8));  // 3 members, 2 CPUs
  REQUIRE_FALSE(own_cpu_each({cpus({0, 1, 2, 3}), cpus({0, 1, 2, 3}), cpus({0, 1, 2, 3})}, 2));  // 2 online
}

// The barrier's step off a CPU two members keep meeting on: the thread leaves that CPU and
// gets its own mask back. Counts moves over a few tries (a thread may be moved back by the
// scheduler at any moment after, so one try could see it back already).
TEST_CASE("shm step off a CPU: the thread moves to another CPU of its mask and keeps its mask", "[comm][shm][spin]") {
  using saker::comm::step_off_cpu;
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  if (CPU_COUNT(&before) < 2) {
    WARN("this thread may run on one CPU only: nothing to step off to");
    REQUIRE_FALSE(step_off_cpu(sched_getcpu()));
    return;
  }
  int moved = 0;
  for (int i = 0; i < 5; ++i) {
    const int cpu = sched_getcpu();
    REQUIRE(step_off_cpu(cpu));
    moved += sched_getcpu() != cpu ? 1 : 0;
    cpu_set_t after;
    REQUIRE(sched_getaffinity(0, sizeof after, &after) == 0);
    REQUIRE(CPU_EQUAL(&after, &before));
  }
  REQUIRE(moved > 0);
  // A mask of one CPU: nowhere to go, nothing changes.
  const int cpu = sched_getcpu();
  const cpu_set_t one = cpus({cpu});
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  REQUIRE_FALSE(step_off_cpu(cpu));
  cpu_set_t after;
  REQUIRE(sched_getaffinity(0, sizeof after, &after) == 0);
  REQUIRE(CPU_EQUAL(&after, &one));
  REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
}
