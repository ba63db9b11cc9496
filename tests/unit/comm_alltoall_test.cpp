// Native alltoall (uneven splits), reduce-scatter and the prod op: exact results on every
// transport and world size, the ring's and the direct algorithm's bits, sealed links, and
// the cross-rank refusals (every rank throws the same error, names the ranks, and the
// communicator stays usable).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "comm_test_support.hpp"
#include "launcher/comm/reduce.hpp"
#include "saker/error.hpp"

using namespace saker::comm;
using saker::comm::test::Failures;
using saker::comm::test::run_ranks;

namespace {

// Rows that rank `from` sends rank `to`: uneven, some zero.
std::size_t rows_between(int from, int to, int n) { return static_cast<std::size_t>((from * 3 + to * 5 + n) % 4); }

// Element k of the rows from -> to: identifies sender, receiver and position.
std::int64_t cell(int from, int to, std::size_t k) {
  return static_cast<std::int64_t>(from) * 1000000 + static_cast<std::int64_t>(to) * 10000 + static_cast<std::int64_t>(k);
}

std::vector<std::string> nodes_for(Transport t, int n) {
  std::vector<std::string> nodes;
  for (int r = 0; r < n; ++r)
    nodes.push_back(t == Transport::shm ? "a" : t == Transport::ring ? "n" + std::to_string(r) : (r % 2 ? "b" : "a"));
  return nodes;
}

void check_alltoall(int n, Transport t, Transit transit = Transit::auth) {
  Options o = test::quick_options();
  o.transit = transit;
  run_ranks(n, [&](Communicator& c, Failures& f) {
    const int me = c.rank();
    for (std::size_t row : {std::size_t{1}, std::size_t{3}, std::size_t{40000}}) {
      std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(sc.size());
      std::vector<std::int64_t> send;
      for (int j = 0; j < n; ++j) {
        sc[static_cast<std::size_t>(j)] = rows_between(me, j, n);
        rc[static_cast<std::size_t>(j)] = rows_between(j, me, n);
        for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)] * row; ++k) send.push_back(cell(me, j, k));
      }
      std::vector<std::int64_t> got;
      auto learned = c.alltoallv(send.data(), sc, row, DataType::i64, [&](const std::vector<std::size_t>& counts) {
        std::size_t total = 0;
        for (std::size_t x : counts) total += x;
        got.assign(total * row, -1);
        return static_cast<void*>(got.data());
      }, "t");
      if (learned != rc) f.add("rank " + std::to_string(me) + ": learned receive counts differ");
      std::vector<std::int64_t> given(got.size(), -1);
      c.alltoallv(send.data(), sc, given.data(), rc, row, DataType::i64);
      std::size_t at = 0;
      for (int i = 0; i < n; ++i)
        for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)] * row; ++k, ++at)
          if (at >= got.size() || got[at] != cell(i, me, k) || given[at] != cell(i, me, k)) {
            f.add("rank " + std::to_string(me) + ": wrong element from rank " + std::to_string(i) + " at " + std::to_string(k));
            return;
          }
      if (at != got.size()) f.add("rank " + std::to_string(me) + ": received too much");
    }
  }, o, nodes_for(t, n));
}

double value(int rank, std::size_t i) { return static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11) - 5; }

// Values for prod: 1, 2 or -1, so that any product over 4 ranks is exact in every type.
double prod_value(int rank, std::size_t i) {
  static const double v[] = {1, 2, -1};
  return v[(i + static_cast<std::size_t>(rank)) % 3];
}

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

double reference(int n, std::size_t i, DataType t, ReduceOp op) {
  if (op == ReduceOp::prod) {
    double acc = 1;
    for (int r = 0; r < n; ++r) acc *= prod_value(r, i);
    return acc;
  }
  double acc = value(0, i);
  for (int r = 1; r < n; ++r)
    acc = op == ReduceOp::min ? std::min(acc, value(r, i)) : op == ReduceOp::max ? std::max(acc, value(r, i)) : acc + value(r, i);
  if (op != ReduceOp::avg) return acc;
  if (t == DataType::i32 || t == DataType::i64) return static_cast<double>(static_cast<std::int64_t>(acc) / n);
  std::vector<char> tmp(8);
  put(tmp.data(), 0, t, acc);
  reduce::scale_for_avg(tmp.data(), 1, t, n);
  return get(tmp.data(), 0, t);
}

double input(int rank, std::size_t i, ReduceOp op) { return op == ReduceOp::prod ? prod_value(rank, i) : value(rank, i); }

// counts[r] per rank: uneven, one zero among them when n > 2.
std::vector<std::size_t> counts_for(int n, std::size_t base) {
  std::vector<std::size_t> c;
  for (int r = 0; r < n; ++r) c.push_back(n > 2 && r == 1 ? 0 : base + static_cast<std::size_t>(r) * 3);
  return c;
}

void check_reduce_scatter(int n, Transport t) {
  run_ranks(n, [&](Communicator& c, Failures& f) {
    const int me = c.rank();
    for (DataType type : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i32, DataType::i64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max, ReduceOp::avg, ReduceOp::prod})
        for (std::size_t base : {std::size_t{1}, std::size_t{1000}, std::size_t{300001}}) {
          if (base > 1000 && type != DataType::f32 && type != DataType::bf16) continue;
          auto counts = counts_for(n, base);
          std::size_t total = 0, first = 0;
          for (int r = 0; r < n; ++r) (r < me ? first : total) += counts[static_cast<std::size_t>(r)];
          total += first;
          const std::size_t es = size_of(type);
          std::vector<char> send(total * es), recv(counts[static_cast<std::size_t>(me)] * es + 1, 'z');
          for (std::size_t i = 0; i < total; ++i) put(send.data(), i, type, input(me, i, op));
          const std::vector<char> before = send;
          c.reduce_scatter(send.data(), recv.data(), counts, type, op, "rs");
          if (send != before) f.add("rank " + std::to_string(me) + ": reduce_scatter wrote its input");
          if (recv.back() != 'z') f.add("rank " + std::to_string(me) + ": reduce_scatter wrote past its share");
          for (std::size_t k = 0; k < counts[static_cast<std::size_t>(me)]; ++k)
            if (get(recv.data(), k, type) != reference(n, first + k, type, op)) {
              f.add("rank " + std::to_string(me) + " " + name_of(type) + " " + name_of(op) + " count " + std::to_string(total) +
                    " element " + std::to_string(k) + ": got " + std::to_string(get(recv.data(), k, type)) + " want " +
                    std::to_string(reference(n, first + k, type, op)));
              break;
            }
        }
  }, test::quick_options(), nodes_for(t, n));
}

// Runs body on every rank and returns each rank's error text ("" when none).
std::vector<std::string> errors_of(int n, const std::function<void(Communicator&)>& body,
                                   const std::function<void(Communicator&)>& after = {}) {
  std::vector<std::string> errs(static_cast<std::size_t>(n));
  run_ranks(n, [&](Communicator& c, Failures& f) {
    try {
      body(c);
    } catch (const saker::Error& e) {
      errs[static_cast<std::size_t>(c.rank())] = e.what();
    }
    // The communicator stays usable: a collective after the refusal gives the right sum.
    int v = c.rank() + 1;
    c.allreduce(&v, 1, DataType::i32);
    if (v != n * (n + 1) / 2) f.add("allreduce after the refusal gave " + std::to_string(v));
    if (after) after(c);
  });
  return errs;
}

void require_same_refusal(const std::vector<std::string>& errs, const std::vector<std::string>& needles) {
  for (const std::string& e : errs) {
    INFO(e);
    REQUIRE(e == errs[0]);  // every rank throws the same text
    for (const std::string& needle : needles) REQUIRE(e.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("alltoall: uneven splits arrive exactly, every transport and world size", "[comm][alltoall]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size " << n);
    check_alltoall(n, Transport::shm);
    check_alltoall(n, Transport::ring);
    check_alltoall(n, Transport::hierarchical);
  }
}

// Rank `from`'s bits for rank `to` in round `it`: every float bit pattern (NaNs, -0,
// denormals) may occur, so only a bitwise copy passes.
std::uint32_t bits(int from, int to, int it, std::size_t k) {
  std::uint64_t x = (static_cast<std::uint64_t>(from) << 48) ^ (static_cast<std::uint64_t>(to) << 40) ^
                    (static_cast<std::uint64_t>(it) << 32) ^ k;
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint32_t>(x >> 29);
}

// Uneven rows per pair and round, zero for some pairs, up to `most`.
std::size_t rows_in(int from, int to, int it, std::size_t most) {
  return static_cast<std::size_t>(bits(from, to, it, 77) % (most + 1)) * ((from + to + it) % 5 == 0 ? 0 : 1);
}

// One alltoallv of rank me's rows for round it (fp32 rows of `row` elements, bit patterns
// from bits()), checked bit for bit; the received rows come back for comparison.
std::vector<std::uint32_t> alltoall_round(Communicator& c, Failures& f, int it, std::size_t row, std::size_t most) {
  const int n = c.size(), me = c.rank();
  std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(sc.size());
  std::vector<std::uint32_t> send;
  for (int j = 0; j < n; ++j) {
    sc[static_cast<std::size_t>(j)] = rows_in(me, j, it, most);
    rc[static_cast<std::size_t>(j)] = rows_in(j, me, it, most);
    for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)] * row; ++k) send.push_back(bits(me, j, it, k));
  }
  std::size_t total = 0;
  for (std::size_t x : rc) total += x;
  std::vector<std::uint32_t> got(total * row + 1, 0xdeadbeef);  // one guard word past the end
  c.alltoallv(send.data(), sc, got.data(), rc, row, DataType::f32, "bits");
  std::size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)] * row; ++k, ++at)
      if (got[at] != bits(i, me, it, k)) {
        f.add("rank " + std::to_string(me) + " round " + std::to_string(it) + ": wrong bits from rank " +
              std::to_string(i) + " at " + std::to_string(k));
        return got;
      }
  if (got.back() != 0xdeadbeef) f.add("rank " + std::to_string(me) + ": wrote past the receive buffer");
  got.pop_back();
  return got;
}

// One node, transport shm: the data goes through the shared-memory segment (alltoall.cpp),
// in rounds of one share per peer; rows of up to 3 MB per pair take several rounds.
TEST_CASE("alltoall through shared memory: bitwise, uneven splits, several rounds, 2-5 ranks", "[comm][alltoall][shm]") {
  for (int n = 2; n <= 5; ++n) {
    INFO("world size " << n);
    std::vector<std::vector<std::vector<std::uint32_t>>> by_transport;
    for (Transport t : {Transport::shm, Transport::ring}) {
      std::vector<std::vector<std::uint32_t>> out(static_cast<std::size_t>(n));
      run_ranks(n, [&](Communicator& c, Failures& f) {
        int it = 0;
        for (std::size_t row : {std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{250007}})
          for (int rep = 0; rep < 2; ++rep, ++it) {
            auto got = alltoall_round(c, f, it, row, row > 1000 ? 3 : 9);
            auto& mine = out[static_cast<std::size_t>(c.rank())];
            mine.insert(mine.end(), got.begin(), got.end());
          }
        // Nothing moves at all: every count zero.
        std::vector<std::size_t> zero(static_cast<std::size_t>(n), 0);
        c.alltoallv(nullptr, zero, nullptr, zero, 4, DataType::f32, "empty");
      }, test::quick_options(), nodes_for(t, n));
      by_transport.push_back(out);
    }
    REQUIRE(by_transport[0] == by_transport[1]);
  }
}

// The segment's slot sets alternate between calls: alltoall, allgather, allreduce and
// broadcast in any order, with sizes that end on either set, never see each other's data.
TEST_CASE("shared memory: alltoall, allgather, allreduce and broadcast interleaved stay exact", "[comm][alltoall][shm]") {
  for (int n : {2, 3}) {
    INFO("world size " << n);
    run_ranks(n, [&](Communicator& c, Failures& f) {
      const int me = c.rank();
      for (int it = 0; it < 24; ++it) {
        alltoall_round(c, f, it, 1 + static_cast<std::size_t>(it % 4) * 40000, 3);
        const std::size_t part = 1 + static_cast<std::size_t>(it) * 37003 % 1500000;
        std::vector<std::uint32_t> mine(part), all(part * static_cast<std::size_t>(n) + 1, 0xdeadbeef);
        for (std::size_t k = 0; k < part; ++k) mine[k] = bits(me, -1, it, k);
        c.allgather(mine.data(), all.data(), part * 4);
        for (int i = 0; i < n; ++i)
          for (std::size_t k = 0; k < part; k += 997)
            if (all[static_cast<std::size_t>(i) * part + k] != bits(i, -1, it, k)) {
              f.add("allgather round " + std::to_string(it) + ": wrong bits from rank " + std::to_string(i));
              return;
            }
        if (all.back() != 0xdeadbeef) f.add("allgather wrote past the receive buffer");
        std::int64_t v = me + it;
        c.allreduce(&v, 1, DataType::i64);
        if (v != static_cast<std::int64_t>(n * (n - 1) / 2 + n * it)) f.add("allreduce between alltoalls went wrong");
        std::uint32_t b = me == it % n ? bits(it, it, it, 0) : 0;
        c.broadcast(&b, 4, it % n);
        if (b != bits(it, it, it, 0)) f.add("broadcast between alltoalls went wrong");
      }
    });
  }
}

// In place (send is the rank's own part of recv), and zero bytes.
TEST_CASE("allgather through shared memory: in place, empty, bitwise", "[comm][allgather][shm]") {
  run_ranks(3, [&](Communicator& c, Failures& f) {
    const std::size_t part = 3000001;  // several slots
    std::vector<std::uint32_t> all(part * 3, 0);
    for (std::size_t k = 0; k < part; ++k) all[static_cast<std::size_t>(c.rank()) * part + k] = bits(c.rank(), 9, 9, k);
    c.allgather(all.data() + static_cast<std::size_t>(c.rank()) * part, all.data(), part * 4);
    for (int i = 0; i < 3; ++i)
      for (std::size_t k = 0; k < part; ++k)
        if (all[static_cast<std::size_t>(i) * part + k] != bits(i, 9, 9, k)) {
          f.add("in-place allgather: wrong bits from rank " + std::to_string(i) + " at " + std::to_string(k));
          return;
        }
    c.allgather(nullptr, nullptr, 0);
  });
}

// Two ranks take the ring's exchange (alltoall.cpp): large uneven transfers, with the send
// thread forced on and off, plain and sealed.
TEST_CASE("alltoall: two ranks, large uneven transfers, send thread on and off, sealed", "[comm][alltoall]") {
  for (const char* thread : {"1", "0"})
    for (Transit transit : {Transit::auth, Transit::encrypt}) {
      setenv("SAKER_COMM_SEND_THREAD", thread, 1);
      Options o = test::quick_options();
      o.transit = transit;
      run_ranks(2, [&](Communicator& c, Failures& f) {
        const int me = c.rank();
        const std::size_t row = 100003;  // rows of 800 KB: 1 to 3 of them per direction
        std::vector<std::size_t> sc = me == 0 ? std::vector<std::size_t>{1, 3} : std::vector<std::size_t>{2, 2};
        // rank 0 sends {1, 3} rows, rank 1 {2, 2}: so rank 0 receives {1, 2}, rank 1 {3, 2}.
        std::vector<std::size_t> rc = me == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{3, 2};
        std::vector<std::int64_t> send;
        for (int j = 0; j < 2; ++j)
          for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)] * row; ++k) send.push_back(cell(me, j, k));
        std::vector<std::int64_t> got((rc[0] + rc[1]) * row, -1);
        c.alltoallv(send.data(), sc, got.data(), rc, row, DataType::i64, "big");
        std::size_t at = 0;
        for (int i = 0; i < 2; ++i)
          for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)] * row; ++k, ++at)
            if (got[at] != cell(i, me, k)) {
              f.add("rank " + std::to_string(me) + ": wrong element from rank " + std::to_string(i) + " at " + std::to_string(k));
              return;
            }
      }, o, {"n0", "n1"});
      unsetenv("SAKER_COMM_SEND_THREAD");
    }
}

TEST_CASE("reduce_scatter: every type and op against the reference, input untouched", "[comm][reduce_scatter]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size " << n);
    check_reduce_scatter(n, Transport::shm);
    check_reduce_scatter(n, Transport::ring);
  }
  check_reduce_scatter(3, Transport::hierarchical);
}

TEST_CASE("reduce_scatter: the direct algorithm and the ring give the same bits", "[comm][reduce_scatter][determinism]") {
  auto run = [](const char* direct) {
    setenv("SAKER_COMM_DIRECT_BYTES", direct, 1);
    setenv("SAKER_COMM_EXCHANGE_BYTES", "0", 1);
    std::vector<std::vector<float>> out(3);
    run_ranks(3, [&](Communicator& c, Failures&) {
      std::mt19937 rng(11 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      std::vector<std::size_t> counts{20011, 19999, 20003};
      std::vector<float> send(60013);
      for (float& x : send) x = d(rng);
      out[static_cast<std::size_t>(c.rank())].resize(counts[static_cast<std::size_t>(c.rank())]);
      c.reduce_scatter(send.data(), out[static_cast<std::size_t>(c.rank())].data(), counts, DataType::f32);
    });
    unsetenv("SAKER_COMM_DIRECT_BYTES");
    unsetenv("SAKER_COMM_EXCHANGE_BYTES");
    return out;
  };
  auto ring = run("0"), direct = run("100000000");
  REQUIRE(ring == direct);
}

TEST_CASE("alltoall and reduce_scatter sealed in transit give plaintext's bits", "[comm][encrypt]") {
  auto run = [](Transit transit) {
    Options o = test::quick_options();
    o.transit = transit;
    std::vector<std::vector<float>> out(3);
    run_ranks(3, [&](Communicator& c, Failures&) {
      std::mt19937 rng(5 + static_cast<unsigned>(c.rank()));
      std::normal_distribution<float> d(0.0f, 1e3f);
      std::vector<float> send(900007);
      for (float& x : send) x = d(rng);
      std::vector<std::size_t> counts{300001, 300003, 300003};
      std::vector<float>& mine = out[static_cast<std::size_t>(c.rank())];
      mine.resize(counts[static_cast<std::size_t>(c.rank())]);
      c.reduce_scatter(send.data(), mine.data(), counts, DataType::f32);
      std::vector<std::size_t> rows{100, static_cast<std::size_t>(c.rank()) * 7, 3};
      c.alltoallv(send.data(), rows, 1000, DataType::f32, [&](const std::vector<std::size_t>& got) {
        std::size_t total = 0;
        for (std::size_t x : got) total += x;
        mine.resize(mine.size() + total * 1000);
        return static_cast<void*>(mine.data() + mine.size() - total * 1000);
      });
    }, o, {"n0", "n1", "n2"});
    return out;
  };
  REQUIRE(run(Transit::auth) == run(Transit::encrypt));
}

TEST_CASE("prod: allreduce multiplies on every transport, integers wrap", "[comm][allreduce]") {
  for (Transport t : {Transport::shm, Transport::ring, Transport::hierarchical})
    for (int n : {2, 3, 4})
      run_ranks(n, [&](Communicator& c, Failures& f) {
        for (DataType type : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i32, DataType::i64}) {
          std::vector<char> v(70001 * size_of(type));
          for (std::size_t i = 0; i < 70001; ++i) put(v.data(), i, type, prod_value(c.rank(), i));
          c.allreduce(v.data(), 70001, type, ReduceOp::prod);
          for (std::size_t i = 0; i < 70001; ++i)
            if (get(v.data(), i, type) != reference(n, i, type, ReduceOp::prod)) {
              f.add(std::string("prod ") + name_of(type) + " wrong at " + std::to_string(i));
              break;
            }
        }
        std::int32_t big = INT32_MAX;  // wraps as unsigned multiplication does, no UB
        c.allreduce(&big, 1, DataType::i32, ReduceOp::prod);
        std::uint32_t want = 1;
        for (int r = 0; r < n; ++r) want *= static_cast<std::uint32_t>(INT32_MAX);
        if (static_cast<std::uint32_t>(big) != want) f.add("int32 prod did not wrap");
      }, test::quick_options(), nodes_for(t, n));
  std::vector<float> one(3, 5.0f);
  reduce::fill_identity(one.data(), one.size(), DataType::f32, ReduceOp::prod);
  REQUIRE(one == std::vector<float>(3, 1.0f));
}

TEST_CASE("alltoall refusals: every rank throws the same error naming the ranks", "[comm][alltoall][mismatch]") {
  SECTION("a type that differs") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<std::int64_t> send(2, 7), recv(2);
      c.alltoallv(send.data(), {1, 1}, recv.data(), {1, 1}, 1, c.rank() == 0 ? DataType::i64 : DataType::f64, "grads");
    });
    require_same_refusal(errs, {"alltoall of 'grads'", "type differs", "rank 0 int64", "rank 1 fp64"});
  }
  SECTION("a row size that differs") {
    auto errs = errors_of(3, [](Communicator& c) {
      std::vector<float> send(30), recv(30);
      c.alltoallv(send.data(), {1, 1, 1}, 3 + static_cast<std::size_t>(c.rank() == 2), DataType::f32,
                  [&](const std::vector<std::size_t>&) { return static_cast<void*>(recv.data()); }, "emb");
    });
    require_same_refusal(errs, {"'emb'", "row size", "rank 2 4"});
  }
  SECTION("an expected count that is not what is sent") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(8), recv(8);
      std::vector<std::size_t> rc = c.rank() == 1 ? std::vector<std::size_t>{3, 2} : std::vector<std::size_t>{2, 2};
      c.alltoallv(send.data(), {2, 2}, recv.data(), rc, 1, DataType::f32, "x");
    });
    require_same_refusal(errs, {"rank 1 expects 3 rows from rank 0, which sends it 2"});
  }
  SECTION("counts for the wrong number of ranks") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(8), recv(8);
      std::vector<std::size_t> sc = c.rank() == 0 ? std::vector<std::size_t>{1, 1, 1} : std::vector<std::size_t>{1, 1};
      c.alltoallv(send.data(), sc, 1, DataType::f32, [&](const std::vector<std::size_t>&) { return static_cast<void*>(recv.data()); });
    });
    require_same_refusal(errs, {"rank 0 gave 3 counts for 2 ranks"});
  }
  SECTION("an asynchronous refusal fails the handle only") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(8), recv(8);
      c.alltoallv_async(send.data(), {1, 1}, recv.data(), {1, 1}, c.rank() + 1, DataType::f32, "a").wait();
    });
    require_same_refusal(errs, {"alltoall of 'a'", "row size"});
  }
  // One node: the declarations share the first round's barrier with the data
  // (ShmGroup::alltoallv_start); a refused alltoall must still leave recv untouched.
  SECTION("nothing reaches the receive buffer of a refused alltoall, on 3 ranks") {
    std::atomic<int> written{0};
    auto errs = errors_of(3, [&](Communicator& c) {
      std::vector<std::int32_t> send(300, 5), recv(300, -7);
      try {
        c.alltoallv(send.data(), {1, 1, 1}, recv.data(), {1, 1, 1}, 100, c.rank() == 1 ? DataType::f32 : DataType::i32, "w");
      } catch (...) {
        for (std::int32_t x : recv) written += x != -7 ? 1 : 0;
        throw;
      }
    });
    require_same_refusal(errs, {"alltoall of 'w'", "type differs", "rank 1 fp32"});
    REQUIRE(written == 0);
  }
  SECTION("counts for the wrong number of ranks, both ways known") {
    auto errs = errors_of(3, [](Communicator& c) {
      std::vector<float> send(8), recv(8);
      std::vector<std::size_t> sc = c.rank() == 2 ? std::vector<std::size_t>{1, 1} : std::vector<std::size_t>{1, 1, 1};
      c.alltoallv(send.data(), sc, recv.data(), {1, 1, 1}, 1, DataType::f32, "short");
    });
    require_same_refusal(errs, {"alltoall of 'short'", "rank 2 gave 2 counts for 3 ranks"});
  }
}

TEST_CASE("reduce_scatter refusals: counts, op, type or another collective", "[comm][reduce_scatter][mismatch]") {
  SECTION("counts that differ") {
    auto errs = errors_of(3, [](Communicator& c) {
      std::vector<float> send(12), recv(12);
      std::vector<std::size_t> counts = c.rank() == 1 ? std::vector<std::size_t>{4, 4, 4} : std::vector<std::size_t>{2, 5, 5};
      c.reduce_scatter(send.data(), recv.data(), counts, DataType::f32, ReduceOp::sum, "w");
    });
    require_same_refusal(errs, {"reduce_scatter of 'w'", "counts differ", "rank 1 [4, 4, 4]", "rank 0 [2, 5, 5]"});
  }
  SECTION("an op that differs") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(4), recv(4);
      c.reduce_scatter(send.data(), recv.data(), {2, 2}, DataType::f32, c.rank() ? ReduceOp::max : ReduceOp::sum);
    });
    require_same_refusal(errs, {"op differs", "rank 0 sum", "rank 1 max"});
  }
  SECTION("a type that differs (never a reinterpretation of the bytes)") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<std::int32_t> send(4, 1), recv(4);
      c.reduce_scatter(send.data(), recv.data(), {2, 2}, c.rank() ? DataType::f32 : DataType::i32);
    });
    require_same_refusal(errs, {"type differs", "rank 0 int32", "rank 1 fp32"});
  }
  SECTION("one rank in an alltoall, the other in a reduce_scatter") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(4), recv(4);
      if (c.rank() == 0) c.reduce_scatter(send.data(), recv.data(), {2, 2}, DataType::f32);
      else c.alltoallv(send.data(), {2, 2}, recv.data(), {2, 2}, 1, DataType::f32);
    });
    for (const std::string& e : errs) REQUIRE(e.find("the collective differs: rank 0 reduce_scatter, rank 1 alltoall") != std::string::npos);
  }
  SECTION("an asynchronous refusal fails the handle only") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(4), recv(4);
      c.reduce_scatter_async(send.data(), recv.data(), {2, 2}, DataType::f32, c.rank() ? ReduceOp::prod : ReduceOp::sum).wait();
    });
    require_same_refusal(errs, {"op differs", "rank 1 prod"});
  }
}
