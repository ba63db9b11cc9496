// plan_links: how a rank drives its links, from the machine's CPUs and the ranks that
// share them; the environment overrides, and bad values are refused by name.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "comm_mesh_support.hpp"
#include "launcher/comm/mesh.hpp"
#include "launcher/comm/ring.hpp"
#include "launcher/comm/tuning.hpp"

using saker::comm::LinkPlan;
using saker::comm::plan_links;
using saker::comm::stripe_threads;
using saker::comm::stripes_for_node;
using saker::comm::TimedChoice;

TEST_CASE("link plan follows the cores and the ranks sharing them", "[comm][tuning]") {
  // One rank on a 32-core node: busy-polling; the send thread is timed, not assumed.
  LinkPlan big = plan_links(32, 1);
  CHECK(big.send_thread == -1);
  CHECK(big.busy_poll_bytes >= (1u << 20));
  CHECK(big.direct_bytes == LinkPlan::kCalibrate);
  CHECK(big.exchange_bytes == LinkPlan::kCalibrate);
  // As many ranks as cores: each may spin.
  LinkPlan full = plan_links(2, 2);
  CHECK(full.send_thread == -1);
  CHECK(full.busy_poll_bytes == big.busy_poll_bytes);
  // More ranks than cores: spinning would hold a core another rank's copies need.
  CHECK(plan_links(2, 4).busy_poll_bytes < big.busy_poll_bytes);
}

TEST_CASE("link plan overrides from the environment", "[comm][tuning]") {
  setenv("SAKER_COMM_SEND_THREAD", "1", 1);
  setenv("SAKER_COMM_DIRECT_BYTES", "0", 1);
  setenv("SAKER_COMM_BUSY_POLL_BYTES", "0", 1);
  LinkPlan p = plan_links(1, 8);
  CHECK(p.send_thread == 1);
  CHECK(p.direct_bytes == 0);
  CHECK(p.exchange_bytes == 0);  // one limit given: the other is off, nothing is calibrated
  CHECK(p.busy_poll_bytes == 0);
  for (const char* bad : {"-1", "lots", "12k", ""}) {
    INFO("SAKER_COMM_DIRECT_BYTES='" << bad << "'");
    setenv("SAKER_COMM_DIRECT_BYTES", bad, 1);
    if (*bad) CHECK_THROWS_WITH(plan_links(1, 1), Catch::Contains("SAKER_COMM_DIRECT_BYTES"));
    else CHECK(plan_links(1, 1).direct_bytes == LinkPlan::kCalibrate);  // empty: unset
  }
  setenv("SAKER_COMM_SEND_THREAD", "0", 1);
  CHECK(plan_links(1, 8).send_thread == 0);
  unsetenv("SAKER_COMM_SEND_THREAD");
  unsetenv("SAKER_COMM_DIRECT_BYTES");
  unsetenv("SAKER_COMM_BUSY_POLL_BYTES");
}

TEST_CASE("the ring's block size follows the last-level cache and the ranks sharing it", "[comm][tuning]") {
  // 32 MiB shared by 2 CPUs, 2 ranks here: a quarter of each one's 16 MiB.
  CHECK(plan_links(2, 2, {32u << 20, 2}).block_bytes == (4u << 20));
  // One rank on a node whose 32 MiB L3 serves 16 CPUs: it has the cache to itself.
  CHECK(plan_links(16, 1, {32u << 20, 16}).block_bytes == (8u << 20));
  // 8 ranks on one 8-CPU cache of 16 MiB: never below 1 MiB.
  CHECK(plan_links(8, 8, {16u << 20, 8}).block_bytes == (1u << 20));
  // Ranks spread over a machine with many small caches: at most the cache's CPUs share one.
  CHECK(plan_links(64, 64, {32u << 20, 8}).block_bytes == (1u << 20));
  CHECK(plan_links(64, 4, {256u << 20, 8}).block_bytes == (16u << 20));
  // Unknown cache: the fixed default.
  CHECK(plan_links(2, 2).block_bytes == LinkPlan::kDefaultBlock);
  setenv("SAKER_COMM_BLOCK_BYTES", "0", 1);
  CHECK(plan_links(2, 2, {32u << 20, 2}).block_bytes == 0);
  setenv("SAKER_COMM_BLOCK_BYTES", "4M", 1);
  CHECK_THROWS_WITH(plan_links(2, 2), Catch::Contains("SAKER_COMM_BLOCK_BYTES"));
  unsetenv("SAKER_COMM_BLOCK_BYTES");
}

TEST_CASE("the last-level cache is read from sysfs, not glibc", "[comm][tuning]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("saker-cache-" + std::to_string(getpid()));
  auto index = [&](int i, const char* type, const char* size, const char* shared) {
    fs::create_directories(dir / ("index" + std::to_string(i)));
    std::ofstream(dir / ("index" + std::to_string(i)) / "type") << type << "\n";
    std::ofstream(dir / ("index" + std::to_string(i)) / "size") << size << "\n";
    std::ofstream(dir / ("index" + std::to_string(i)) / "shared_cpu_list") << shared << "\n";
  };
  // This machine's layout (a 2-vCPU KVM guest): glibc's sysconf said 384 MiB here.
  index(0, "Data", "48K", "0");
  index(1, "Instruction", "32K", "0");
  index(2, "Unified", "1024K", "0");
  index(3, "Unified", "32768K", "0-1");
  auto c = saker::comm::last_level_cache(dir.string());
  CHECK(c.bytes == (32u << 20));
  CHECK(c.cpus == 2);
  // A CCX of 8 CPUs written as ranges and singles.
  index(3, "Unified", "32768K", "0-3,64-66,70");
  CHECK(saker::comm::last_level_cache(dir.string()).cpus == 8);
  fs::remove_all(dir);
  // No sysfs (a container without it): unknown, so the plan keeps its default.
  CHECK(saker::comm::last_level_cache(dir.string()).bytes == 0);
}

// Judged alone, a rank picks by its own figures; agreed, it follows the verdict.
// The schedule of agreements counts calls only, so it is the same on every rank.
TEST_CASE("timed choice: agreements at fixed calls override a rank's own figures", "[comm][tuning]") {
  constexpr std::size_t kBytes = 4u << 20;
  TimedChoice c;
  std::vector<int> due;
  for (int call = 0; call < 40; ++call) {
    if (c.agreement_due(kBytes)) due.push_back(call);
    bool second = c.second(kBytes);
    c.record(kBytes, second, second ? 0.001 : 0.002);  // this rank finds the second way faster
  }
  CHECK(due == std::vector<int>{9, 17, 25, 33});
  CHECK(c.figures(kBytes)[1] < c.figures(kBytes)[0]);
  CHECK(c.second(kBytes));
  c.agree(kBytes, false);  // the ring's slowest member found the first way faster
  int second = 0;
  for (int call = 0; call < 31; ++call) {
    bool s = c.second(kBytes);
    second += s ? 1 : 0;
    c.record(kBytes, s, s ? 0.001 : 0.002);
  }
  CHECK(second <= 1);  // only the every-32nd look at the other way
}

TEST_CASE("timed choice: the median, not the best, of a widely spread way", "[comm][tuning]") {
  // A send thread's calls spread 0.27-1.2 ms, the single loop's 0.25-0.38 ms (4 MiB
  // here): its best call is among the fastest of all, its median is 2x slower.
  constexpr std::size_t kBytes = 4u << 20;
  TimedChoice c;
  double spread[] = {0.00027, 0.0012, 0.0009, 0.0011}, steady[] = {0.00036, 0.00030, 0.00038, 0.00032};
  int k = 0;
  for (int call = 0; call < 9; ++call) {
    bool s = c.second(kBytes);
    c.record(kBytes, s, s ? spread[k % 4] : steady[k % 4]);
    k += s ? 1 : 0;
  }
  CHECK_FALSE(c.second(kBytes));
}

// Members of one ring whose plans differ (their machines' caches differ) must still cut
// the same blocks: they settle on the smallest on the first allreduce, and the result
// is the unblocked ring's, bit for bit.
TEST_CASE("ring members with different block plans agree on the smallest", "[comm][tuning]") {
  using namespace saker::comm;
  constexpr int n = 3;
  auto loopback = test::loopback_peers(n);
  auto& peers = loopback.peers;
  auto& listeners = loopback.listeners;
  const std::size_t plans[n] = {8u << 20, 64u << 10, 1u << 20};
  std::size_t agreed[n] = {};
  std::vector<std::vector<float>> blocked(n), whole(n);
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Mesh mesh(r, peers, std::move(listeners[static_cast<std::size_t>(r)]), std::chrono::seconds(10),
                  auth::Context{auth::JobKey::from_raw(std::string(32, '\x5a')), "test"});
        auto values = [&] {
          std::vector<float> v(300'007);
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / static_cast<float>(1 + (i * 31 + static_cast<std::size_t>(r) * 7) % 1013);
          return v;
        };
        LinkPlan plan;
        plan.direct_bytes = plan.exchange_bytes = 0;
        plan.block_bytes = plans[r];
        Ring ring(mesh, {0, 1, 2}, 0, 256 << 10, plan);
        auto v = values();
        ring.allreduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        agreed[r] = ring.plan().block_bytes;
        blocked[static_cast<std::size_t>(r)] = v;
        plan.block_bytes = 0;
        Ring unblocked(mesh, {0, 1, 2}, 2, 256 << 10, plan);
        v = values();
        unblocked.allreduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        whole[static_cast<std::size_t>(r)] = v;
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : threads) t.join();
  REQUIRE(errors.empty());
  for (int r = 0; r < n; ++r) {
    CHECK(agreed[r] == (64u << 10));
    CHECK(blocked[static_cast<std::size_t>(r)] == whole[0]);
  }
}

TEST_CASE("cores and machine identity are measured", "[comm][tuning]") {
  CHECK(saker::comm::cores_online() >= 1);
  CHECK(saker::comm::machine_id() == saker::comm::machine_id());
  CHECK(saker::comm::machine_id().find(' ') == std::string::npos);  // one token in the rendezvous entry
}

TEST_CASE("shared-memory stripes follow the CPUs per rank on the node", "[comm][tuning]") {
  CHECK(stripes_for_node(2, 2) == 1);    // a 2-CPU guest with 2 ranks: no spare core
  CHECK(stripes_for_node(1, 4) == 1);    // oversubscribed
  CHECK(stripes_for_node(16, 2) == 4);   // 8 CPUs a rank, capped at 4
  CHECK(stripes_for_node(12, 4) == 3);
  CHECK(stripes_for_node(64, 0) == 4);   // no count given: as if one rank
  setenv("SAKER_COMM_SHM_STRIPES", "2", 1);
  CHECK(stripes_for_node(2, 2) == 2);
  for (const char* bad : {"0", "17", "x", "-3"}) {
    INFO("SAKER_COMM_SHM_STRIPES='" << bad << "'");
    setenv("SAKER_COMM_SHM_STRIPES", bad, 1);
    CHECK_THROWS_WITH(stripes_for_node(16, 2), Catch::Contains("SAKER_COMM_SHM_STRIPES"));
  }
  unsetenv("SAKER_COMM_SHM_STRIPES");
}

TEST_CASE("a rank runs as many stripes at once as it has CPUs", "[comm][tuning]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  CHECK(stripe_threads(4) == std::min(4, CPU_COUNT(&all)));
  CHECK(stripe_threads(1) == 1);
  // Pinned to one CPU (as srun --cpu-bind or the SPANK plugin may do): one thread.
  int pinned = -1;
  std::thread([&] {  // Catch's macros stay on the test's thread
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) pinned = stripe_threads(4);
  }).join();
  CHECK(pinned == 1);
}
