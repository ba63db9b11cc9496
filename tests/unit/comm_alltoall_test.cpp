// Native alltoall (uneven splits), reduce-scatter and the prod op: exact results on every
// transport and world size, the ring's and the direct algorithm's bits, sealed links, and
// the cross-rank refusals (every rank throws the same error, names the ranks, and the
// communicator stays usable).
#include <catch2/catch.hpp>

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
