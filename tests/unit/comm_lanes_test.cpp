// Lanes: one job over a few threads; run() returns only when every lane is done, and a
// lane's error reaches the caller only after the others stopped.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "launcher/comm/lanes.hpp"

using saker::comm::Lanes;

TEST_CASE("lanes: each lane runs once per job, and run returns after the slowest", "[comm][lanes]") {
  Lanes lanes(4);
  REQUIRE(lanes.count() == 4);
  std::array<std::atomic<int>, 4> runs{};
  std::atomic<bool> slow_done{false};
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> lane0_on_caller{true};
  for (int job = 0; job < 500; ++job) {  // many jobs in a row: no wake-up may be lost
    lanes.run([&](int lane) {
      runs[static_cast<std::size_t>(lane)]++;
      if (lane == 0 && std::this_thread::get_id() != caller) lane0_on_caller = false;
      if (job == 3 && lane == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        slow_done = true;
      }
    });
    if (job == 3) CHECK(slow_done);
    for (auto& r : runs) REQUIRE(r == job + 1);
  }
  CHECK(lane0_on_caller);
}

TEST_CASE("lanes: an error reaches the caller after every lane stopped, and the lanes stay usable", "[comm][lanes]") {
  Lanes lanes(3);
  for (int thrower : {0, 2}) {
    INFO("lane " << thrower << " throws");
    std::atomic<bool> slow_done{false};
    int slow = thrower == 0 ? 1 : 0;
    CHECK_THROWS_WITH(lanes.run([&](int lane) {
      if (lane == slow) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        slow_done = true;
      }
      if (lane == thrower) throw std::runtime_error("lane " + std::to_string(lane) + " broke");
    }), "lane " + std::to_string(thrower) + " broke");
    CHECK(slow_done);
    std::atomic<int> ran{0};
    lanes.run([&](int) { ran++; });
    CHECK(ran == 3);
  }
}

TEST_CASE("lanes: a job on fewer lanes runs only those, and wakes no other thread", "[comm][lanes]") {
  Lanes lanes(4);
  std::array<std::atomic<int>, 4> runs{};
  for (int used : {2, 4, 1, 3, 0, 9}) {  // 0: all; more than count(): all
    INFO("lanes " << used);
    for (auto& r : runs) r = 0;
    lanes.run([&](int lane) { runs[static_cast<std::size_t>(lane)]++; }, used);
    int want = used <= 0 || used > 4 ? 4 : used;
    for (int lane = 0; lane < 4; ++lane) CHECK(runs[static_cast<std::size_t>(lane)] == (lane < want ? 1 : 0));
  }
}

TEST_CASE("lanes: one lane (or a nonsense count) runs inline on the caller", "[comm][lanes]") {
  for (int count : {1, 0, -2}) {
    Lanes lanes(count);
    CHECK(lanes.count() == 1);
    std::thread::id seen;
    lanes.run([&](int lane) { CHECK(lane == 0); seen = std::this_thread::get_id(); });
    CHECK(seen == std::this_thread::get_id());
  }
}
