// The canonical-order sum over logical workers (launcher/comm/ordered_reduce.hpp): the
// mapping of workers onto ranks, and the sum's bits across world sizes and transports.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "common/shm_names.hpp"
#include "launcher/comm/ordered_reduce.hpp"
#include "launcher/comm/shm.hpp"
#include "tests/unit/comm_test_support.hpp"

using namespace saker::comm;
using saker::comm::test::run_ranks;

namespace {

// Logical worker l's contribution: values over 40 binary orders of magnitude and both
// signs, so that summing them in another order almost surely changes some bits.
std::vector<float> contribution(int l, std::size_t count) {
  std::vector<float> v(count);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(l + 1);
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double unit = static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5;
    v[i] = static_cast<float>(std::ldexp(unit, static_cast<int>(x % 41) - 20));
  }
  return v;
}

std::vector<float> reference(int logical, std::size_t count) {
  std::vector<std::vector<float>> parts;
  std::vector<const float*> ptrs;
  for (int l = 0; l < logical; ++l) parts.push_back(contribution(l, count));
  for (auto& p : parts) ptrs.push_back(p.data());
  std::vector<float> out(count);
  canonical_sum(ptrs, count, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `world` ranks (one node, or one node each), each summing the contributions of
// its logical workers through OrderedReduce; returns every rank's result.
std::vector<std::vector<float>> ordered_over(int world, int logical, std::size_t count, bool one_node,
                                             Transit transit = Transit::auth) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
  std::vector<std::string> nodes;
  for (int r = 0; r < world; ++r) nodes.push_back(one_node ? "node0" : "node" + std::to_string(r));
  run_ranks(world, [&](Communicator& comm, saker::comm::test::Failures&) {
    OrderedReduce reduce(comm, logical);
    const LogicalMap& map = reduce.map();
    std::vector<std::vector<float>> mine;
    std::vector<float*> ptrs;
    for (int j = 0; j < map.count(comm.rank()); ++j) mine.push_back(contribution(map.first(comm.rank()) + j, count));
    for (auto& m : mine) ptrs.push_back(m.data());
    std::vector<float> out(count);
    reduce.sum(ptrs, count, out.data());
    results[static_cast<std::size_t>(comm.rank())] = out;
  }, [&] {
    Options o = saker::comm::test::quick_options();
    o.transit = transit;
    return o;
  }(), nodes);
  return results;
}

}  // namespace

TEST_CASE("logical map: every worker has exactly one rank, in contiguous blocks", "[comm][ordered]") {
  for (int logical = 1; logical <= 9; ++logical) {
    for (int world = 1; world <= 9; ++world) {
      LogicalMap map(logical, world);
      int next = 0;
      for (int r = 0; r < world; ++r) {
        CHECK(map.first(r) == next);
        next += map.count(r);
        for (int j = 0; j < map.count(r); ++j) CHECK(map.owner(map.first(r) + j) == r);
      }
      CHECK(next == logical);
      CHECK(map.widest() == (logical + world - 1) / world);
    }
  }
  LogicalMap four_on_three(4, 3);
  CHECK(four_on_three.describe(2) == "logical workers 2..3 of 4");
  CHECK(four_on_three.describe(0) == "logical worker 0 of 4");
  CHECK(LogicalMap(2, 3).describe(0) == "no logical worker of 2");
  CHECK_THROWS_AS(LogicalMap(0, 2), saker::Error);
}

TEST_CASE("canonical sum: the order of a ring allreduce over L ranks, for any size", "[comm][ordered]") {
  // The canonical order is defined as the ring's; this pins the two together, so a change
  // of the ring's order (ring.cpp) cannot silently change every saker-train result.
  // Sizes for each of the ring's algorithms (exchange, direct, pipelined ring, and the
  // ring in several cache-sized blocks: 3 Mi floats are 12 MiB).
  for (std::size_t count : {std::size_t{7}, std::size_t{1000}, std::size_t{70001}, std::size_t{3u << 20}}) {
    for (int n : {2, 3, 4}) {
      std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
      std::vector<std::string> nodes;
      for (int r = 0; r < n; ++r) nodes.push_back("node" + std::to_string(r));
      run_ranks(n, [&](Communicator& comm, saker::comm::test::Failures&) {
        comm.set_transport(Transport::ring);
        std::vector<float> v = contribution(comm.rank(), count);
        comm.allreduce(v.data(), count, DataType::f32, ReduceOp::sum);
        got[static_cast<std::size_t>(comm.rank())] = v;
      }, saker::comm::test::quick_options(), nodes);
      const std::vector<float> want = reference(n, count);
      for (int r = 0; r < n; ++r) CHECK(same_bits(got[static_cast<std::size_t>(r)], want));
    }
  }
}

TEST_CASE("ordered reduce: the same bits on one node (shared memory) as on separate nodes", "[comm][ordered]") {
  const std::size_t count = 5003;
  const std::vector<float> want = reference(4, count);
  // The test can fail: on one node the default transport (shared memory) sums in rank
  // order, which gives other bits for this data than the canonical order.
  std::vector<std::vector<float>> plain(4);
  run_ranks(4, [&](Communicator& comm, saker::comm::test::Failures&) {
    std::vector<float> v = contribution(comm.rank(), count);
    comm.allreduce(v.data(), count, DataType::f32, ReduceOp::sum);
    plain[static_cast<std::size_t>(comm.rank())] = v;
  });
  CHECK_FALSE(same_bits(plain[0], want));
  for (bool one_node : {true, false}) {
    for (const auto& got : ordered_over(4, 4, count, one_node)) CHECK(same_bits(got, want));
  }
}

TEST_CASE("ordered reduce: the same bits when the logical workers move onto fewer or more ranks", "[comm][ordered]") {
  for (std::size_t count : {std::size_t{5}, std::size_t{4099}}) {
    const std::vector<float> want = reference(4, count);
    // 4 workers on 4, then 3, 2, 1 ranks (some ranks compute two or more), and on 5
    // (one rank computes none): every rank of every mapping gets the same bits.
    for (int world : {4, 3, 2, 1, 5}) {
      for (bool one_node : {true, false}) {
        INFO("world " << world << ", count " << count << (one_node ? ", one node" : ", a node each"));
        for (const auto& got : ordered_over(world, 4, count, one_node)) CHECK(same_bits(got, want));
      }
    }
    // Sealed links between nodes (Transit::encrypt) carry the same bits.
    for (const auto& got : ordered_over(3, 4, count, false, Transit::encrypt)) CHECK(same_bits(got, want));
  }
}

namespace {

// This process's segments in /dev/shm (test ranks are threads of one process): what a
// communicator or an ordered sum failed to remove.
int segments_left() {
  const std::string prefix = "saker-" + std::to_string(getpid()) + "-";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

struct PathSeen {
  std::mutex mu;
  int shm = 0, other = 0, transport_changed = 0;
};

// As ordered_over on one node, recording which path each rank took; with in_place (one
// worker per rank), the sum overwrites the rank's own contribution.
std::vector<std::vector<float>> on_one_node(int world, int logical, std::size_t count, PathSeen& seen,
                                            Transport transport = Transport::automatic, bool in_place = false) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
  Options o = saker::comm::test::quick_options();
  o.transport = transport;
  run_ranks(world, [&](Communicator& comm, saker::comm::test::Failures&) {
    const Transport before = comm.transport();
    OrderedReduce reduce(comm, logical);
    {
      std::lock_guard lock(seen.mu);
      (reduce.shm_path() ? seen.shm : seen.other) += 1;
      if (reduce.shm_path() && comm.transport() != before) seen.transport_changed += 1;
    }
    const LogicalMap& map = reduce.map();
    std::vector<std::vector<float>> mine;
    std::vector<float*> ptrs;
    for (int j = 0; j < map.count(comm.rank()); ++j) mine.push_back(contribution(map.first(comm.rank()) + j, count));
    for (auto& m : mine) ptrs.push_back(m.data());
    std::vector<float> out(count);
    float* into = in_place ? ptrs[0] : out.data();
    // Twice: the second sum runs on the slot set the first left for it.
    for (int round = 0; round < 2; ++round) {
      if (in_place && round == 1) {
        const std::vector<float> again = contribution(map.first(comm.rank()), count);
        std::copy(again.begin(), again.end(), mine[0].begin());  // ptrs[0] stays valid
      }
      reduce.sum(ptrs, count, into);
    }
    results[static_cast<std::size_t>(comm.rank())] = in_place ? mine[0] : out;
  }, o);
  return results;
}

}  // namespace

TEST_CASE("ordered reduce: through shared memory on one node, the same bits for 1, 2, 3 and 4 ranks",
          "[comm][ordered][shm]") {
  // 3 floats leave some canonical segments empty; 5 and 4099 take the one-barrier path;
  // 70001 one step of chunks; 600001 (150001 a segment for L = 4) several, the last short.
  for (std::size_t count : {std::size_t{3}, std::size_t{5}, std::size_t{4099}, std::size_t{70001}, std::size_t{600001}}) {
    for (int logical : {4, 5}) {
      const std::vector<float> want = reference(logical, count);
      for (int world : {1, 2, 3, 4}) {
        INFO("L " << logical << ", world " << world << ", count " << count);
        PathSeen seen;
        for (const auto& got : on_one_node(world, logical, count, seen)) CHECK(same_bits(got, want));
        CHECK(seen.shm == (world > 1 ? world : 0));
        CHECK(seen.transport_changed == 0);  // the communicator's other calls keep shared memory
      }
    }
    // L == world, summed in place (what saker-train's default run does).
    INFO("in place, count " << count);
    PathSeen seen;
    for (const auto& got : on_one_node(4, 4, count, seen, Transport::automatic, true))
      CHECK(same_bits(got, reference(4, count)));
    CHECK(seen.shm == 4);
  }
  CHECK(segments_left() == 0);
}

TEST_CASE("ordered reduce: SAKER_COMM_TRANSPORT=ring keeps the sum off /dev/shm, with the same bits",
          "[comm][ordered][shm]") {
  const std::size_t count = 70001;
  PathSeen seen;
  for (const auto& got : on_one_node(3, 4, count, seen, Transport::ring)) CHECK(same_bits(got, reference(4, count)));
  CHECK(seen.shm == 0);
  CHECK(seen.other == 3);
}

TEST_CASE("ordered reduce through shared memory: a rank that stops coming is named, nothing stays in /dev/shm",
          "[comm][ordered][shm]") {
  std::mutex mu;
  std::string error;
  Options o = saker::comm::test::quick_options();
  o.timeout = std::chrono::milliseconds(1500);
  run_ranks(2, [&](Communicator& comm, saker::comm::test::Failures&) {
    OrderedReduce reduce(comm, 2);
    if (comm.rank() == 1) return;  // never sums: rank 0 waits for it in vain
    std::vector<float> v(200000, 1.0f);
    float* parts[1] = {v.data()};
    try {
      reduce.sum(parts, v.size(), v.data());
    } catch (const saker::Error& e) {
      std::lock_guard lock(mu);
      error = e.what();
    }
  }, o);
  CHECK_THAT(error, Catch::Contains("rank 1 (host host-node0) did not answer within 1500 ms"));
  CHECK(segments_left() == 0);
}

namespace {

struct Layout {
  std::vector<std::string> nodes;  // rank r's node
  int logical;
};

// ranks_per_node {2, 3}: ranks 0-1 on node0, 2-4 on node1.
Layout blocks(std::vector<int> ranks_per_node, int logical) {
  Layout l{{}, logical};
  for (std::size_t j = 0; j < ranks_per_node.size(); ++j)
    for (int k = 0; k < ranks_per_node[j]; ++k) l.nodes.push_back("node" + std::to_string(j));
  return l;
}

// Every rank's result of OrderedReduce on this layout (and how many took the node chain).
std::vector<std::vector<float>> over_layout(const Layout& layout, std::size_t count, int& chained,
                                            Transit transit = Transit::auth) {
  const int world = static_cast<int>(layout.nodes.size());
  std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
  std::mutex mu;
  chained = 0;
  Options o = saker::comm::test::quick_options();
  o.transit = transit;
  run_ranks(world, [&](Communicator& comm, saker::comm::test::Failures&) {
    OrderedReduce reduce(comm, layout.logical);
    const LogicalMap& map = reduce.map();
    std::vector<std::vector<float>> mine;
    std::vector<float*> ptrs;
    for (int j = 0; j < map.count(comm.rank()); ++j) mine.push_back(contribution(map.first(comm.rank()) + j, count));
    for (auto& m : mine) ptrs.push_back(m.data());
    std::vector<float> out(count);
    // Twice, the second in place where the rank has a worker: the chain's buffers and the
    // node's segment are reused, and out may alias the first contribution.
    reduce.sum(ptrs, count, out.data());
    std::vector<float> again(count);
    if (!ptrs.empty()) {
      std::copy(mine[0].begin(), mine[0].end(), again.begin());
      ptrs[0] = again.data();
    }
    reduce.sum(ptrs, count, again.data());
    if (!same_bits(again, out)) out.assign(count, 0.0f);  // the check below then fails
    std::lock_guard lock(mu);
    chained += reduce.chain_path() ? 1 : 0;
    results[static_cast<std::size_t>(comm.rank())] = out;
  }, o, layout.nodes);
  return results;
}

}  // namespace

TEST_CASE("ordered reduce over several nodes of several ranks: shared memory in a node, the flat canonical bits",
          "[comm][ordered][nodes]") {
  // 5 floats leave segments empty; 4099 is one window; 1 Mi + 4097 floats take several
  // windows for L = 4 (262144 elements of each segment a window), the last one short.
  const std::vector<Layout> layouts = {
      blocks({2, 2}, 4),        // 2 nodes x 2 ranks
      blocks({3, 3}, 6),        // 2 x 3
      blocks({2, 2, 2}, 6),     // 3 x 2
      blocks({3, 1}, 4),        // uneven: 3 ranks and 1
      blocks({1, 2, 3}, 6),     // uneven, 3 nodes
      blocks({2, 2}, 7),        // L > ranks: ranks compute 1 or 2 workers
      blocks({2, 3}, 9),        // L > ranks, uneven
      blocks({2, 2, 1}, 11),
      blocks({2, 2}, 3),        // L < ranks: rank 0, a leader, computes no worker
      blocks({2, 4}, 4),        // rank 3, not a leader, computes none
  };
  for (std::size_t count : {std::size_t{5}, std::size_t{4099}}) {
    for (const Layout& layout : layouts) {
      INFO("L " << layout.logical << ", " << layout.nodes.size() << " ranks, count " << count);
      const std::vector<float> want = reference(layout.logical, count);
      int chained = 0;
      for (const auto& got : over_layout(layout, count, chained)) CHECK(same_bits(got, want));
      CHECK(chained == static_cast<int>(layout.nodes.size()));
    }
  }
  const std::size_t big = (1u << 20) + 4097;
  for (const Layout& layout : {blocks({2, 2}, 4), blocks({1, 2, 3}, 6)}) {
    INFO("L " << layout.logical << ", several windows, count " << big);
    int chained = 0;
    const std::vector<float> want = reference(layout.logical, big);
    for (const auto& got : over_layout(layout, big, chained)) CHECK(same_bits(got, want));
    CHECK(chained == static_cast<int>(layout.nodes.size()));
  }
  // Sealed links between the leaders (Transit::encrypt) carry the same bits.
  int chained = 0;
  for (const auto& got : over_layout(blocks({2, 3}, 5), 4099, chained, Transit::encrypt))
    CHECK(same_bits(got, reference(5, 4099)));
  CHECK(chained == 5);
  CHECK(segments_left() == 0);
}

TEST_CASE("ordered reduce over nodes: the order is pinned (a node-by-node sum gives other bits), and layouts the "
          "chain cannot take keep the flat path",
          "[comm][ordered][nodes]") {
  // What a hierarchical sum does (each node's terms first, then the nodes' sums): the
  // communicator's own allreduce on 2 nodes x 2 ranks. On this data it differs from the
  // canonical order, so the equality above would fail if the chain folded node by node.
  const std::size_t count = 4099;
  const Layout layout = blocks({2, 2}, 4);
  std::vector<std::vector<float>> plain(4);
  run_ranks(4, [&](Communicator& comm, saker::comm::test::Failures&) {
    std::vector<float> v = contribution(comm.rank(), count);
    comm.allreduce(v.data(), count, DataType::f32, ReduceOp::sum);
    plain[static_cast<std::size_t>(comm.rank())] = v;
  }, saker::comm::test::quick_options(), layout.nodes);
  CHECK_FALSE(same_bits(plain[0], reference(4, count)));
  // Interleaved nodes (ranks 0 and 2 on one, 1 and 3 on the other) and a node without a
  // worker (5 ranks for 4 workers) are not the chain's: the flat paths, the same bits.
  int chained = 0;
  for (const auto& got : over_layout(Layout{{"a", "b", "a", "b"}, 4}, count, chained))
    CHECK(same_bits(got, reference(4, count)));
  CHECK(chained == 0);
  for (const auto& got : over_layout(Layout{{"a", "b", "b", "b", "b"}, 4}, count, chained))
    CHECK(same_bits(got, reference(4, count)));
  CHECK(chained == 0);
}

TEST_CASE("shm segment: a failed start's cleanup closes, unmaps and removes the name (segment::abandon)", "[comm][shm]") {
  const std::string name = saker::shm_names::fresh();  // /saker-PID-HEX: segments_left() sees it
  const std::size_t bytes = 4096;
  const int fd = segment::create(name, bytes);
  char* base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(base != MAP_FAILED);
  CHECK(segments_left() == 1);
  segment::abandon(fd, base, bytes, name);
  CHECK(base == nullptr);
  CHECK(fcntl(fd, F_GETFD) == -1);  // closed
  CHECK(segments_left() == 0);
  char* none = nullptr;
  segment::abandon(-1, none, bytes, "");  // nothing opened yet: nothing to do, nothing thrown
  CHECK(none == nullptr);
}
