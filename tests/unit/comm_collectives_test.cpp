#include <catch2/catch.hpp>

#include <sched.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>

#include "comm_test_support.hpp"
#include "launcher/comm/reduce.hpp"

using namespace saker::comm;
using saker::comm::test::Failures;
using saker::comm::test::run_ranks;

namespace {

// Small integers: exact in every type, so any reduction order gives the reference.
double value(int rank, std::size_t i) { return static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11) - 5; }

void put(void* p, std::size_t i, DataType t, double v) {
  switch (t) {
    case DataType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::f64: static_cast<double*>(p)[i] = v; break;
    case DataType::i32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
    case DataType::i64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
    case DataType::f16: static_cast<unsigned short*>(p)[i] = reduce::float_to_half(static_cast<float>(v)); break;
    case DataType::bf16: static_cast<unsigned short*>(p)[i] = reduce::float_to_bf16(static_cast<float>(v)); break;
  }
}

double reference(int n, std::size_t i, DataType t, ReduceOp op) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = value(r, i);
    acc = op == ReduceOp::min ? std::min(acc, v) : op == ReduceOp::max ? std::max(acc, v) : acc + v;
  }
  if (op != ReduceOp::avg) return acc;
  if (t == DataType::i32 || t == DataType::i64) return static_cast<double>(static_cast<std::int64_t>(acc) / n);
  std::vector<char> tmp(8);
  put(tmp.data(), 0, t, acc);
  reduce::scale_for_avg(tmp.data(), 1, t, n);
  switch (t) {
    case DataType::f32: return *reinterpret_cast<float*>(tmp.data());
    case DataType::f64: return *reinterpret_cast<double*>(tmp.data());
    case DataType::f16: return reduce::half_to_float(*reinterpret_cast<unsigned short*>(tmp.data()));
    default: return reduce::bf16_to_float(*reinterpret_cast<unsigned short*>(tmp.data()));
  }
}

double get(const void* p, std::size_t i, DataType t) {
  switch (t) {
    case DataType::f32: return static_cast<const float*>(p)[i];
    case DataType::f64: return static_cast<const double*>(p)[i];
    case DataType::i32: return static_cast<const std::int32_t*>(p)[i];
    case DataType::i64: return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case DataType::f16: return reduce::half_to_float(static_cast<const unsigned short*>(p)[i]);
    case DataType::bf16: return reduce::bf16_to_float(static_cast<const unsigned short*>(p)[i]);
  }
  return 0;
}

const DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i32, DataType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

void check_allreduce_everything(int n, Transport t, std::vector<std::string> nodes) {
  run_ranks(n, [&](Communicator& c, Failures& f) {
    c.set_transport(t);
    // 0, fewer elements than ranks, non-divisible, several ring chunks, several shm slots.
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{70003}})
      for (DataType type : kTypes)
        for (ReduceOp op : kOps) {
          std::vector<char> buf(count * size_of(type) + 1);
          for (std::size_t i = 0; i < count; ++i) put(buf.data(), i, type, value(c.rank(), i));
          c.allreduce(buf.data(), count, type, op);
          for (std::size_t i = 0; i < count; ++i)
            if (get(buf.data(), i, type) != reference(n, i, type, op)) {
              f.add(std::string(name_of(t)) + " n=" + std::to_string(n) + " " + name_of(type) + " " + name_of(op) +
                    " count=" + std::to_string(count) + " i=" + std::to_string(i) + ": got " +
                    std::to_string(get(buf.data(), i, type)) + " want " + std::to_string(reference(n, i, type, op)));
              break;
            }
        }
    // One large fp32 buffer crosses many shm slots and ring chunks.
    std::vector<float> big(1'500'007);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(value(c.rank(), i));
    c.allreduce(big.data(), big.size(), DataType::f32);
    for (std::size_t i = 0; i < big.size(); ++i)
      if (big[i] != reference(n, i, DataType::f32, ReduceOp::sum)) { f.add("big buffer wrong at " + std::to_string(i)); break; }
  }, test::quick_options(), nodes);
}

}  // namespace

TEST_CASE("allreduce: every op, type and size against the reference, every transport", "[comm][allreduce]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size " << n);
    check_allreduce_everything(n, Transport::ring, {});
    check_allreduce_everything(n, Transport::shm, {});
    std::vector<std::string> two_nodes;
    for (int r = 0; r < n; ++r) two_nodes.push_back(r < (n + 1) / 2 ? "a" : "b");
    check_allreduce_everything(n, Transport::hierarchical, two_nodes);
  }
  // Uneven nodes (2 + 1 + 2 ranks) and automatic choice.
  check_allreduce_everything(5, Transport::automatic, {"a", "a", "b", "c", "c"});
}

// Large shared-memory allreduces cut into stripes (shm.hpp). The attacks: stripes that do
// not divide the buffer, a piece count per stripe that differs, and ranks that run their
// stripes on different numbers of threads (rank 0 pinned to one CPU runs them one after
// another while the others run them at once): none may hang, and every element must
// come out as the reference and as the same bits as without stripes.
TEST_CASE("shm stripes: the reference and the unstriped bits, whatever each rank's thread count", "[comm][allreduce]") {
  auto pin_rank0 = [](int r) {
    if (r != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
  };
  // 6 MiB of f32, odd: cut into up to 5 stripes of whole cache lines, the last one short.
  constexpr std::size_t kCount = 1'500'007;
  auto run = [&](int n, const char* stripes, DataType type, ReduceOp op, bool random,
                 Transport transport = Transport::shm) {
    setenv("SAKER_COMM_SHM_STRIPES", stripes, 1);
    std::vector<std::string> nodes;  // hierarchical: two nodes, shm inside each
    if (transport == Transport::hierarchical)
      for (int r = 0; r < n; ++r) nodes.push_back(r < (n + 1) / 2 ? "a" : "b");
    struct Unset {  // also when a rank fails: later tests must not inherit the stripes
      ~Unset() { unsetenv("SAKER_COMM_SHM_STRIPES"); }
    } unset;
    std::vector<std::vector<char>> results(static_cast<std::size_t>(n));
    run_ranks(n, [&](Communicator& c, Failures& f) {
      c.set_transport(transport);
      std::vector<char> v(kCount * size_of(type));
      std::mt19937 rng(7 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      for (std::size_t i = 0; i < kCount; ++i) put(v.data(), i, type, random ? d(rng) : value(c.rank(), i));
      for (int call = 0; call < 2; ++call) {  // the second call reuses the lanes' threads and slots
        std::vector<char> buf = v;
        c.allreduce(buf.data(), kCount, type, op);
        if (!random)
          for (std::size_t i = 0; i < kCount; ++i)
            if (get(buf.data(), i, type) != reference(n, i, type, op)) {
              f.add(std::string("stripes=") + stripes + " " + name_of(type) + " " + name_of(op) + " i=" +
                    std::to_string(i) + ": got " + std::to_string(get(buf.data(), i, type)));
              break;
            }
        results[static_cast<std::size_t>(c.rank())] = buf;
      }
    }, test::quick_options(), nodes, pin_rank0);
    for (int r = 1; r < n; ++r) CHECK(results[static_cast<std::size_t>(r)] == results[0]);
    return results[0];
  };
  for (int n : {2, 3})
    for (DataType type : {DataType::f32, DataType::f64, DataType::bf16, DataType::i32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        INFO("n=" << n << " " << name_of(type) << " " << name_of(op));
        for (const char* stripes : {"3", "4"}) run(n, stripes, type, op, false);
      }
  for (int n : {2, 3})
    for (DataType type : {DataType::f32, DataType::bf16}) {
      INFO("random values, n=" << n << " " << name_of(type));
      auto one = run(n, "1", type, ReduceOp::sum, true);
      CHECK(run(n, "3", type, ReduceOp::sum, true) == one);
      CHECK(run(n, "16", type, ReduceOp::sum, true) == one);
    }
  // The hierarchical path reduces and broadcasts inside each node through the same stripes.
  for (int n : {3, 4})
    for (DataType type : {DataType::f32, DataType::bf16}) {
      INFO("hierarchical, n=" << n << " " << name_of(type));
      run(n, "4", type, ReduceOp::avg, false, Transport::hierarchical);
      auto one = run(n, "1", type, ReduceOp::sum, true, Transport::hierarchical);
      CHECK(run(n, "4", type, ReduceOp::sum, true, Transport::hierarchical) == one);
    }
}

TEST_CASE("automatic transport follows placement", "[comm][allreduce]") {
  run_ranks(2, [](Communicator& c, Failures& f) { if (c.transport() != Transport::shm) f.add("one node: not shm"); });
  run_ranks(2, [](Communicator& c, Failures& f) { if (c.transport() != Transport::ring) f.add("one per node: not ring"); },
            test::quick_options(), {"a", "b"});
  run_ranks(3, [](Communicator& c, Failures& f) {
    if (c.transport() != Transport::hierarchical) f.add("mixed: not hierarchical");
    if (c.node_count() != 2 || c.local_size() != (c.rank() < 2 ? 2 : 1)) f.add("topology wrong");
  }, test::quick_options(), {"a", "a", "b"});
}

TEST_CASE("broadcast, allgather, barrier and async calls", "[comm][collectives]") {
  for (int n = 1; n <= 4; ++n) {
    run_ranks(n, [n](Communicator& c, Failures& f) {
      for (int root = 0; root < n; ++root)
        for (std::size_t bytes : {std::size_t{0}, std::size_t{5}, std::size_t{3'000'001}}) {
          std::vector<char> buf(bytes, static_cast<char>(c.rank() == root ? 'r' : 'x'));
          if (bytes) buf[bytes - 1] = static_cast<char>(c.rank() == root ? 'e' : 'x');
          c.broadcast(buf.data(), bytes, root);
          if (bytes && (buf[0] != 'r' || buf[bytes - 1] != 'e')) f.add("broadcast from " + std::to_string(root));
        }
      std::vector<std::int32_t> mine(3, c.rank()), all(static_cast<std::size_t>(3 * n), -1);
      c.allgather(mine.data(), all.data(), 3 * sizeof(std::int32_t));
      for (int r = 0; r < n; ++r)
        if (all[static_cast<std::size_t>(3 * r + 2)] != r) f.add("allgather slot " + std::to_string(r));
      c.barrier();
      // Async calls complete in order; a sync call after them sees their effects.
      std::vector<float> a(1000, 1.0f), b(77, 2.0f);
      Handle ha = c.allreduce_async(a.data(), a.size(), DataType::f32);
      Handle hb = c.allreduce_async(b.data(), b.size(), DataType::f32, ReduceOp::max);
      Handle hc = c.barrier_async();
      std::int64_t x = c.rank();
      c.allreduce(&x, 1, DataType::i64);
      hb.wait();
      ha.wait();
      hc.wait();
      if (!ha.done() || a[999] != static_cast<float>(n) || b[0] != 2.0f || x != n * (n - 1) / 2) f.add("async results");
    });
  }
}

TEST_CASE("allreduce is bitwise reproducible for a fixed world size", "[comm][determinism]") {
  auto run = [](Transport t, std::vector<std::string> nodes) {
    std::vector<std::vector<float>> results(3);
    run_ranks(3, [&](Communicator& c, Failures&) {
      c.set_transport(t);
      std::mt19937 rng(1234 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      std::vector<float> v(100'003);
      for (auto& x : v) x = d(rng);
      c.allreduce(v.data(), v.size(), DataType::f32);
      results[static_cast<std::size_t>(c.rank())] = v;
    }, test::quick_options(), nodes);
    return results;
  };
  for (Transport t : {Transport::ring, Transport::shm, Transport::hierarchical}) {
    std::vector<std::string> nodes = t == Transport::hierarchical ? std::vector<std::string>{"a", "a", "b"} : std::vector<std::string>{};
    auto first = run(t, nodes), second = run(t, nodes);
    INFO(name_of(t));
    CHECK(std::memcmp(first[0].data(), second[0].data(), first[0].size() * 4) == 0);
    CHECK(std::memcmp(first[0].data(), first[2].data(), first[0].size() * 4) == 0);  // every rank agrees
  }
}

// The ring, the direct algorithm and the exchange (small allreduces) must give the same
// bits, so that the sizes where one hands over to the next can be measured at run time
// without making results depend on the measurement; so must the ring cut into blocks of
// any size (the block size follows each machine's cache). Values that expose operand
// order: random magnitudes (sum), signed zeros and NaNs with different payloads (min,
// max, sum).
TEST_CASE("direct and ring allreduce give bitwise identical results", "[comm][determinism]") {
  auto run = [](int n, const char* direct_bytes, const char* exchange_bytes, DataType type, ReduceOp op, std::size_t count,
                const char* block_bytes = "0") {
    setenv("SAKER_COMM_DIRECT_BYTES", direct_bytes, 1);
    setenv("SAKER_COMM_EXCHANGE_BYTES", exchange_bytes, 1);
    setenv("SAKER_COMM_BLOCK_BYTES", block_bytes, 1);
    std::vector<std::string> nodes;  // one rank per node: the ring transport's own case
    for (int r = 0; r < n; ++r) nodes.push_back("n" + std::to_string(r));
    std::vector<std::vector<char>> results(static_cast<std::size_t>(n));
    run_ranks(n, [&](Communicator& c, Failures&) {
      c.set_transport(Transport::ring);
      std::mt19937 rng(99 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      std::vector<char> v(count * size_of(type));
      for (std::size_t i = 0; i < count; ++i) {
        float x = d(rng);
        if (i % 7 == 0) x = c.rank() % 2 ? -0.0f : 0.0f;
        if (i % 11 == 0) {  // NaNs whose payload names the rank
          std::uint32_t bits = 0x7fc00000u | static_cast<std::uint32_t>(c.rank() + 1);
          std::memcpy(&x, &bits, 4);
        }
        if (type == DataType::f64) {
          double y = x;
          std::memcpy(v.data() + i * 8, &y, 8);
        } else {
          put(v.data(), i, type, static_cast<double>(x));
          if (type == DataType::f32) std::memcpy(v.data() + i * 4, &x, 4);
        }
      }
      c.allreduce(v.data(), count, type, op);
      results[static_cast<std::size_t>(c.rank())] = v;
    }, test::quick_options(), nodes);
    unsetenv("SAKER_COMM_DIRECT_BYTES");
    unsetenv("SAKER_COMM_EXCHANGE_BYTES");
    unsetenv("SAKER_COMM_BLOCK_BYTES");
    return results;
  };
  for (int n : {2, 3, 4, 5})
    for (DataType type : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max})
        for (std::size_t count : {std::size_t{3}, std::size_t{1001}, std::size_t{20011}}) {
          INFO("n=" << n << " " << name_of(type) << " " << name_of(op) << " count=" << count);
          auto ring = run(n, "0", "0", type, op, count), direct = run(n, "1000000000", "0", type, op, count),
               exchange = run(n, "0", "1000000000", type, op, count),
               // Blocks of 1000 bytes; of 16 bytes, fewer elements than blocks in a segment.
               blocks = run(n, "0", "0", type, op, count, "1000"), tiny_blocks = run(n, "0", "0", type, op, count, "16");
          for (int r = 0; r < n; ++r) {
            REQUIRE(ring[static_cast<std::size_t>(r)] == direct[static_cast<std::size_t>(r)]);
            REQUIRE(ring[static_cast<std::size_t>(r)] == exchange[static_cast<std::size_t>(r)]);
            REQUIRE(ring[static_cast<std::size_t>(r)] == blocks[static_cast<std::size_t>(r)]);
            REQUIRE(ring[static_cast<std::size_t>(r)] == tiny_blocks[static_cast<std::size_t>(r)]);
            REQUIRE(ring[static_cast<std::size_t>(r)] == ring[0]);
          }
        }
}

// Over TCP, a rank's choice of a send thread changes its peers' timings, and every
// member must cut a buffer into the same blocks: both are agreed among the ring's
// members, at points that every member reaches at the same call. Segments of one
// buffer may differ by an element and so straddle a size class or the send thread's
// threshold (3 x 2^18 - 1 floats: segments of 1 MiB and 1 MiB - 4 bytes): if a member
// keyed the schedule on its own segment, the agreements would not line up and the
// ranks would hang or mix up data. Forty calls reach four agreements per size class.
// (Members with different block plans: comm_tuning_test.cpp.)
TEST_CASE("the ring's members agree on the send thread and the blocks", "[comm][tuning]") {
  setenv("SAKER_COMM_BLOCK_BYTES", "0", 1);  // whole segments: steps of about 1 MiB
  constexpr int n = 3;
  std::vector<std::string> nodes{"n0", "n1", "n2"};
  run_ranks(n, [&](Communicator& c, Failures& f) {
    c.set_transport(Transport::ring);
    for (std::size_t count : {std::size_t{3} << 18, (std::size_t{3} << 18) - 1, (std::size_t{3} << 18) + 2,
                              (std::size_t{3} << 19) + 1})
      for (int call = 0; call < 40; ++call) {
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(value(c.rank(), i));
        c.allreduce(v.data(), count, DataType::f32);
        for (std::size_t i = 0; i < count; i += 9973)
          if (v[i] != static_cast<float>(reference(n, i, DataType::f32, ReduceOp::sum))) {
            f.add("rank " + std::to_string(c.rank()) + ": wrong sum at element " + std::to_string(i) + " of " + std::to_string(count));
            return;
          }
        std::vector<float> all(count * n);
        if (call % 8 == 0) c.allgather(v.data(), all.data(), count * sizeof(float));
      }
  }, test::quick_options(), nodes);
  unsetenv("SAKER_COMM_BLOCK_BYTES");
}

// Transit::encrypt seals every byte between nodes (aead.hpp) and must change no bit of
// any result: the ring (in blocks and with its send thread), the direct and exchange
// algorithms (their own loop), the hierarchical path (shared memory inside a node stays
// clear, the leaders' ring is sealed), allgather and broadcast (the relay sends only
// what it has opened).
TEST_CASE("encrypt in transit: every collective gives plaintext's bits", "[comm][encrypt]") {
  struct Outcome {
    std::vector<std::vector<char>> reduced;  // per call, rank 0's
    std::vector<std::vector<char>> gathered, broadcast;
  };
  auto run = [](Transit transit, int n, std::vector<std::string> nodes, const char* direct, const char* exchange) {
    setenv("SAKER_COMM_DIRECT_BYTES", direct, 1);
    setenv("SAKER_COMM_EXCHANGE_BYTES", exchange, 1);
    setenv("SAKER_COMM_BLOCK_BYTES", "1000000", 1);
    Options o = test::quick_options();
    o.transit = transit;
    std::vector<Outcome> out(static_cast<std::size_t>(n));
    run_ranks(n, [&](Communicator& c, Failures& f) {
      Outcome& mine = out[static_cast<std::size_t>(c.rank())];
      std::mt19937 rng(7 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      for (DataType type : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i32})
        for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{70003}, std::size_t{1'500'007}}) {
          if (count > 70003 && type != DataType::f32) continue;
          std::vector<char> v(count * size_of(type));
          for (std::size_t i = 0; i < count; ++i) put(v.data(), i, type, type == DataType::i32 ? value(c.rank(), i) : d(rng));
          c.allreduce(v.data(), count, type, ReduceOp::sum);
          mine.reduced.push_back(v);
        }
      for (std::size_t bytes : {std::size_t{1}, std::size_t{5000}, std::size_t{3'000'001}}) {
        std::vector<char> send(bytes, static_cast<char>('a' + c.rank())), all(bytes * static_cast<std::size_t>(c.size()));
        c.allgather(send.data(), all.data(), bytes);
        mine.gathered.push_back(all);
        std::vector<char> b(bytes, c.rank() == c.size() - 1 ? 'r' : 'x');
        for (std::size_t i = 0; c.rank() == c.size() - 1 && i < bytes; i += 4099) b[i] = static_cast<char>(i);
        c.broadcast(b.data(), bytes, c.size() - 1);
        mine.broadcast.push_back(b);
      }
      c.barrier();
      const bool one_per_node = std::set<std::string>(nodes.begin(), nodes.end()).size() == nodes.size();
      if (c.transport() != (one_per_node ? Transport::ring : Transport::hierarchical)) f.add("unexpected transport");
    }, o, nodes);
    unsetenv("SAKER_COMM_DIRECT_BYTES");
    unsetenv("SAKER_COMM_EXCHANGE_BYTES");
    unsetenv("SAKER_COMM_BLOCK_BYTES");
    return out;
  };
  struct Case { int n; std::vector<std::string> nodes; const char* direct; const char* exchange; };
  for (const Case& k : {Case{2, {"n0", "n1"}, "0", "0"}, Case{3, {"n0", "n1", "n2"}, "0", "0"},
                        Case{3, {"n0", "n1", "n2"}, "1000000", "0"}, Case{3, {"n0", "n1", "n2"}, "0", "1000000"},
                        Case{4, {"a", "a", "b", "b"}, "0", "0"}}) {
    INFO("n=" << k.n << " nodes " << k.nodes.front() << ".." << k.nodes.back() << " direct " << k.direct << " exchange "
              << k.exchange);
    auto clear = run(Transit::auth, k.n, k.nodes, k.direct, k.exchange);
    auto sealed = run(Transit::encrypt, k.n, k.nodes, k.direct, k.exchange);
    for (int r = 0; r < k.n; ++r) {
      const auto& a = clear[static_cast<std::size_t>(r)];
      const auto& b = sealed[static_cast<std::size_t>(r)];
      REQUIRE(a.reduced.size() == b.reduced.size());
      for (std::size_t i = 0; i < a.reduced.size(); ++i) REQUIRE(a.reduced[i] == b.reduced[i]);
      REQUIRE(a.gathered == b.gathered);
      REQUIRE(a.broadcast == b.broadcast);
      REQUIRE(a.reduced == clear[0].reduced);  // and every rank agrees
    }
    for (const auto& g : clear[0].gathered)
      for (int r = 0; r < k.n; ++r) REQUIRE(g[g.size() / static_cast<std::size_t>(k.n) * static_cast<std::size_t>(r)] == 'a' + r);
  }
}
