// Reduce-scatter and the prod op: every type and op against a reference on every
// transport and world size, the same bits from the ring, the direct algorithm and the
// node's shared memory, and sealed links.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "comm_alltoall_support.hpp"

using namespace saker::comm;
using namespace saker::comm::test;

namespace {

double value(int rank, std::size_t i) { return static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11) - 5; }

// Values for prod: 1, 2 or -1, so that any product over 4 ranks is exact in every type.
double prod_value(int rank, std::size_t i) {
  static const double v[] = {1, 2, -1};
  return v[(i + static_cast<std::size_t>(rank)) % 3];
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

}  // namespace

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


// One node, transport shm: the data goes through the segment (ShmGroup::reduce_scatter_finish)
// in rounds of one share per peer; it must give the ring's bits (random values, where the
// order of the terms shows), for uneven counts with a zero, over several rounds.
TEST_CASE("reduce_scatter through shared memory gives the ring's bits: 2-5 ranks, several rounds",
          "[comm][reduce_scatter][shm][determinism]") {
  for (int n = 2; n <= 5; ++n) {
    INFO("world size " << n);
    std::vector<std::size_t> counts;
    for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : 150001 + static_cast<std::size_t>(r) * 7919);
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    auto run = [&](Transport t) {
      std::vector<std::vector<char>> out(static_cast<std::size_t>(n));
      run_ranks(n, [&](Communicator& c, Failures& f) {
        const int me = c.rank();
        auto& mine = out[static_cast<std::size_t>(me)];
        std::mt19937 rng(7 + static_cast<unsigned>(me));
        std::normal_distribution<float> d(0.0f, 1e3f);
        for (auto [type, op] : {std::pair{DataType::f32, ReduceOp::sum}, std::pair{DataType::bf16, ReduceOp::sum},
                                std::pair{DataType::f16, ReduceOp::avg}, std::pair{DataType::f64, ReduceOp::max}}) {
          const std::size_t es = size_of(type), want = counts[static_cast<std::size_t>(me)] * es;
          std::vector<char> send(total * es), recv(want + 1, 'z');
          for (std::size_t i = 0; i < total; ++i) put(send.data(), i, type, d(rng) / (type == DataType::f16 ? 100 : 1));
          c.reduce_scatter(send.data(), recv.data(), counts, type, op, "bits");
          if (recv.back() != 'z') f.add("rank " + std::to_string(me) + ": wrote past its share");
          mine.insert(mine.end(), recv.begin(), recv.end() - 1);
        }
      }, test::quick_options(), nodes_for(t, n));
      return out;
    };
    REQUIRE(run(Transport::shm) == run(Transport::ring));
  }
}
