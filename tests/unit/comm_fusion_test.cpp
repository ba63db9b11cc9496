#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "comm_test_support.hpp"
#include "launcher/comm/fusion.hpp"
#include "launcher/comm/reduce.hpp"

using namespace saker::comm;
using namespace std::chrono_literals;
using saker::comm::test::Failures;
using saker::comm::test::run_ranks;

static Options fusion_options() {
  Options o = test::quick_options();
  o.fusion = true;
  o.fusion_cycle = 1ms;
  o.fusion_bytes = 64 * 1024;  // small: forces several fused groups
  return o;
}

TEST_CASE("fusion: tensors submitted in different orders are matched by name", "[comm][fusion]") {
  for (Transport t : {Transport::ring, Transport::shm}) {
    run_ranks(3, [t](Communicator& c, Failures& f) {
      c.set_transport(t);
      std::vector<std::string> names;
      for (int i = 0; i < 12; ++i) names.push_back("layer" + std::to_string(i));
      std::mt19937 rng(static_cast<unsigned>(c.rank()) * 7 + 1);
      std::vector<std::vector<float>> data(12);
      std::vector<int> order(12);
      for (int i = 0; i < 12; ++i) order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Handle> handles(12);
      for (int i : order) {
        auto& v = data[static_cast<std::size_t>(i)];
        v.assign(static_cast<std::size_t>(1 + i * 3001), static_cast<float>(c.rank() + i));
        handles[static_cast<std::size_t>(i)] = c.enqueue_allreduce(names[static_cast<std::size_t>(i)], v.data(), v.size(), DataType::f32);
      }
      std::int64_t counter = 1;
      Handle hi = c.enqueue_allreduce("step", &counter, 1, DataType::i64, ReduceOp::max);
      for (auto& h : handles) h.wait();
      hi.wait();
      for (int i = 0; i < 12; ++i) {
        float want = static_cast<float>(0 + 1 + 2 + 3 * i);
        const auto& v = data[static_cast<std::size_t>(i)];
        if (v.front() != want || v.back() != want) f.add("tensor " + std::to_string(i) + " wrong");
      }
    }, fusion_options());
  }
}

// A late rank's enqueue wakes only its own fusion thread; the early rank, whose last
// cycle found the name on it alone, must come back soon, not after a whole fusion cycle.
// Here the cycle is 200 ms: before the partial pause, "a" waited ~180 ms after rank 1
// submitted it. The bound (60 ms) leaves a wide margin for a loaded machine.
TEST_CASE("fusion: after a partial cycle the early rank is back within milliseconds, not a cycle", "[comm][fusion]") {
  Options o = fusion_options();
  o.fusion_cycle = 200ms;
  std::atomic<long> waited_us{-1};
  run_ranks(2, [&](Communicator& c, Failures&) {
    float a = 1, b = 2;
    c.barrier();
    if (c.rank() == 0) {
      Handle ha = c.enqueue_allreduce("a", &a, 1, DataType::f32);
      ha.wait();
      c.enqueue_allreduce("b", &b, 1, DataType::f32).wait();
      return;
    }
    Handle hb = c.enqueue_allreduce("b", &b, 1, DataType::f32);  // a partial cycle: a on 0, b on 1
    std::this_thread::sleep_for(20ms);
    auto t0 = std::chrono::steady_clock::now();
    Handle ha = c.enqueue_allreduce("a", &a, 1, DataType::f32);
    ha.wait();
    waited_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    hb.wait();
  }, o);
  INFO("'a' done " << waited_us << " us after the late rank submitted it (fusion cycle 200 ms)");
  CHECK(waited_us >= 0);
  CHECK(waited_us < 60'000);
}

TEST_CASE("fusion: results do not depend on how tensors were grouped", "[comm][fusion][determinism]") {
  std::vector<float> unfused, fused;
  auto data = [](int rank, std::size_t n) {
    std::mt19937 rng(99 + static_cast<unsigned>(rank));
    std::normal_distribution<float> d(0, 1e4f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  run_ranks(3, [&](Communicator& c, Failures&) {
    c.set_transport(Transport::ring);
    auto a = data(c.rank(), 5003), b = data(c.rank() + 10, 7001);
    c.allreduce(a.data(), a.size(), DataType::f32);
    Handle h1 = c.enqueue_allreduce("x", b.data(), b.size(), DataType::f32);  // fused with "y"
    auto y = data(c.rank() + 20, 333);
    Handle h2 = c.enqueue_allreduce("y", y.data(), y.size(), DataType::f32);
    h1.wait();
    h2.wait();
    auto b2 = data(c.rank() + 10, 7001);
    c.allreduce(b2.data(), b2.size(), DataType::f32);
    if (c.rank() == 0) { unfused = b2; fused = b; }
  }, fusion_options());
  REQUIRE(fused.size() == unfused.size());
  CHECK(std::memcmp(fused.data(), unfused.data(), fused.size() * 4) == 0);
}

TEST_CASE("stall: a tensor one rank never submits is reported naming that rank, then fails", "[comm][fusion][stall]") {
  Options o = fusion_options();
  o.stall_warning = 200ms;
  o.stall_abort = 600ms;
  std::vector<std::string> errors(3);
  run_ranks(3, [&](Communicator& c, Failures& f) {
    float a = 1, b = 2;
    Handle ha = c.enqueue_allreduce("weights", &a, 1, DataType::f32);
    Handle hb;
    if (c.rank() != 1) hb = c.enqueue_allreduce("bias", &b, 1, DataType::f32);  // rank 1 skips it
    ha.wait();
    if (a != 3) f.add("weights not reduced");
    if (hb.valid()) {
      try {
        hb.wait();
        f.add("bias completed although rank 1 never submitted it");
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(c.rank())] = e.what();
      }
    }
  }, o);
  for (int r : {0, 2}) {
    CHECK_THAT(errors[static_cast<std::size_t>(r)], Catch::Contains("'bias'") && Catch::Contains("rank 1 (host") &&
                                                        Catch::Contains("submitted by rank(s) 0, 2"));
  }
}

TEST_CASE("timeline: a Chrome trace with enqueue, fuse and transfer events", "[comm][timeline]") {
  std::string path = "/tmp/saker-comm-timeline-" + std::to_string(getpid()) + "-%r.json";
  Options o = fusion_options();
  o.timeline_path = path;
  run_ranks(2, [](Communicator& c, Failures&) {
    c.set_transport(Transport::ring);  // "transfer" events; shm ones are "reduce"
    std::vector<float> a(1000, 1), b(1000, 2);
    Handle h1 = c.enqueue_allreduce("a", a.data(), a.size(), DataType::f32);
    Handle h2 = c.enqueue_allreduce("b", b.data(), b.size(), DataType::f32);
    h1.wait();
    h2.wait();
    c.allreduce(a.data(), a.size(), DataType::f32);
  }, o);
  std::string file = path.replace(path.find("%r"), 2, "1");
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string trace = ss.str();
  std::remove(file.c_str());
  std::remove(file.replace(file.rfind("-1.json"), 7, "-0.json").c_str());
  CHECK(trace.rfind("[", 0) == 0);
  CHECK(trace.find("]") != std::string::npos);
  for (const char* needle : {"\"enqueue a\"", "\"negotiate\"", "\"cat\":\"transfer\"", "\"ph\":\"X\"", "\"pid\":1"})
    CHECK_THAT(trace, Catch::Contains(needle));
}

// join(): ranks that ran out of data stand in for the others' named tensors. Attacks:
// every op (a zero stand-in would win min/max), every transport, a rank that never
// submits a name, the divisor of avg, bitwise equality with explicit zeros, the
// returned last rank, and a second round (the next epoch).
TEST_CASE("join: a joined rank stands in with the op's identity and avg divides by size", "[comm][fusion][join]") {
  for (Transport t : {Transport::ring, Transport::shm}) {
    std::vector<int> last(3, -9);
    run_ranks(3, [&](Communicator& c, Failures& f) {
      c.set_transport(t);
      const int r = c.rank();
      std::vector<float> avg(1001, static_cast<float>(r + 1) / 7.0f);
      std::vector<float> mn(513, static_cast<float>(r + 5)), mx_f(17, -static_cast<float>(r + 5));
      std::vector<std::int32_t> mx(33, -(r + 10));
      std::vector<std::int64_t> sum(9, r + 100);
      std::vector<unsigned short> half(5, saker::comm::reduce::float_to_half(-1.5f - static_cast<float>(r)));
      if (r == 1) {
        last[1] = c.join();
        return;
      }
      std::vector<Handle> h{c.enqueue_allreduce("avg", avg.data(), avg.size(), DataType::f32, ReduceOp::avg),
                            c.enqueue_allreduce("min", mn.data(), mn.size(), DataType::f32, ReduceOp::min),
                            c.enqueue_allreduce("max_f", mx_f.data(), mx_f.size(), DataType::f32, ReduceOp::max),
                            c.enqueue_allreduce("max", mx.data(), mx.size(), DataType::i32, ReduceOp::max),
                            c.enqueue_allreduce("sum", sum.data(), sum.size(), DataType::i64, ReduceOp::sum),
                            c.enqueue_allreduce("half", half.data(), half.size(), DataType::f16, ReduceOp::max)};
      for (auto& x : h) x.wait();
      if (mn.front() != 5.0f || mn.back() != 5.0f) f.add("min " + std::to_string(mn.front()) + ", want 5 (not 0)");
      if (mx_f.front() != -5.0f) f.add("max f32 " + std::to_string(mx_f.front()) + ", want -5");
      if (mx.front() != -10 || mx.back() != -10) f.add("max i32 " + std::to_string(mx.front()) + ", want -10");
      if (sum.front() != 200 + 2) f.add("sum " + std::to_string(sum.front()) + ", want 202");
      if (half.front() != saker::comm::reduce::float_to_half(-1.5f)) f.add("max f16 wrong");
      const float want = (1.0f / 7 + 3.0f / 7) / 3;  // divided by size(), not by the ranks that submitted
      if (std::abs(avg.front() - want) > 1e-6f) f.add("avg " + std::to_string(avg.front()) + ", want " + std::to_string(want));
      last[static_cast<std::size_t>(r)] = c.join();
    }, fusion_options());
    CHECK(last[0] == last[1]);
    CHECK(last[1] == last[2]);
    CHECK((last[0] == 0 || last[0] == 2));
  }
}

TEST_CASE("join: stand-ins give bitwise the result of explicit zeros", "[comm][fusion][join][determinism]") {
  auto data = [](int rank) {
    std::mt19937 rng(7 + static_cast<unsigned>(rank));
    std::normal_distribution<float> d(0, 1e3f);
    std::vector<float> v(70001);
    for (auto& x : v) x = d(rng);
    return v;
  };
  std::vector<std::vector<float>> joined(3), explicit_zeros(3);
  run_ranks(3, [&](Communicator& c, Failures&) {
    c.set_transport(Transport::ring);
    const auto r = static_cast<std::size_t>(c.rank());
    auto v = r == 2 ? std::vector<float>(70001, 0.0f) : data(c.rank());
    c.enqueue_allreduce("g", v.data(), v.size(), DataType::f32, ReduceOp::avg).wait();
    explicit_zeros[r] = v;
    if (r == 2) {
      c.join();
    } else {
      auto w = data(c.rank());
      c.enqueue_allreduce("g", w.data(), w.size(), DataType::f32, ReduceOp::avg).wait();
      joined[r] = w;
      c.join();
    }
  }, fusion_options());
  for (std::size_t r : {0u, 1u}) {
    REQUIRE(joined[r].size() == explicit_zeros[r].size());
    CHECK(std::memcmp(joined[r].data(), explicit_zeros[r].data(), joined[r].size() * 4) == 0);
  }
}

TEST_CASE("join: the last rank to join is reported on every rank, and the next round starts clean", "[comm][fusion][join]") {
  std::vector<int> first(3, -9), second(3, -9);
  run_ranks(3, [&](Communicator& c, Failures& f) {
    const auto r = static_cast<std::size_t>(c.rank());
    if (r == 2) {
      // Alone: everyone else has joined, so this reduces against two stand-ins.
      std::int64_t late = 5;
      c.enqueue_allreduce("late", &late, 1, DataType::i64).wait();
      if (late != 5) f.add("late " + std::to_string(late) + ", want 5");
      std::this_thread::sleep_for(300ms);
    }
    first[r] = c.join();
    // Round two: everybody submits again, then rank 2 joins first.
    double x = 1;
    c.enqueue_allreduce("epoch2", &x, 1, DataType::f64).wait();
    if (x != 3) f.add("epoch2 " + std::to_string(x) + ", want 3 (a stale join stood in?)");
    if (r != 2) std::this_thread::sleep_for(300ms);
    second[r] = c.join();
  }, fusion_options());
  CHECK(first == std::vector<int>{2, 2, 2});
  CHECK(second[0] == second[1]);
  CHECK(second[1] == second[2]);
  CHECK((second[0] == 0 || second[0] == 1));
}

TEST_CASE("join: a stall report does not blame a rank that has joined", "[comm][fusion][join][stall]") {
  Options o = fusion_options();
  o.stall_warning = 100ms;
  o.stall_abort = 400ms;
  std::string error;
  std::atomic<bool> reported{false};
  run_ranks(3, [&](Communicator& c, Failures& f) {
    if (c.rank() == 2) {
      c.join();
      return;
    }
    float b = 1;
    if (c.rank() == 0) {
      try {
        c.enqueue_allreduce("only0", &b, 1, DataType::f32).wait();
        f.add("'only0' completed although rank 1 never submitted it");
      } catch (const std::exception& e) {
        error = e.what();
      }
      reported = true;
    } else {
      while (!reported) std::this_thread::sleep_for(10ms);  // joining now would stand in for it
    }
    c.join();
  }, o);
  CHECK_THAT(error, Catch::Contains("'only0'") && Catch::Contains("rank 1 (host"));
  CHECK_THAT(error, !Catch::Contains("rank 2 (host"));
}

// The fusion negotiation's cross-rank check: one name, another type, op or count on some
// rank. Every rank that submitted it gets the same error naming the tensor, which ranks
// hold which value, and its data is left as it was (never reduced as something else);
// the tensors around it still reduce.
namespace {

struct Submitted {
  std::size_t count;
  DataType type;
  ReduceOp op;
  std::vector<std::int64_t> shape = {};
};

// Ranks submit "ok" (agreed) and "bad" as `spec(rank)` says; returns each rank's error.
std::vector<std::string> mismatch_errors(int n, const std::function<Submitted(int)>& spec) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  run_ranks(n, [&](Communicator& c, Failures& f) {
    const Submitted s = spec(c.rank());
    std::vector<std::int64_t> bad(s.count, 0x0102030405060708);  // 8 bytes per element: room for every type
    const std::vector<std::int64_t> before = bad;
    float ok = 1;
    Handle hok = c.enqueue_allreduce("ok", &ok, 1, DataType::f32);
    Handle hbad = c.enqueue_allreduce("bad", bad.data(), s.count, s.type, s.op, s.shape);
    try {
      hbad.wait();
      f.add("rank " + std::to_string(c.rank()) + ": 'bad' completed although the ranks disagree");
    } catch (const saker::Error& e) {
      errors[static_cast<std::size_t>(c.rank())] = e.what();
    }
    hok.wait();
    if (ok != static_cast<float>(n)) f.add("'ok' next to the refused tensor was not reduced");
    if (bad != before) f.add("rank " + std::to_string(c.rank()) + ": the refused tensor's data was written");
  }, fusion_options());
  return errors;
}

void require_named(const std::vector<std::string>& errors, const std::vector<std::string>& needles) {
  for (const std::string& e : errors) {
    INFO(e);
    REQUIRE(e == errors[0]);
    for (const std::string& needle : needles) REQUIRE(e.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("fusion: one name with another type, op or count is refused naming the ranks and values", "[comm][fusion][mismatch]") {
  SECTION("type (never the bits of one read as the other)") {
    auto errors = mismatch_errors(2, [](int r) { return Submitted{4, r ? DataType::i32 : DataType::f32, ReduceOp::sum}; });
    require_named(errors, {"tensor 'bad'", "type differs", "fp32 on rank 0", "int32 on rank 1"});
  }
  SECTION("op") {
    auto errors = mismatch_errors(3, [](int r) { return Submitted{4, DataType::f32, r == 2 ? ReduceOp::max : ReduceOp::sum}; });
    require_named(errors, {"tensor 'bad'", "op differs", "sum on ranks 0, 1", "max on rank 2"});
  }
  SECTION("count") {
    auto errors = mismatch_errors(3, [](int r) { return Submitted{r == 1 ? 6u : 4u, DataType::i64, ReduceOp::sum}; });
    require_named(errors, {"tensor 'bad'", "element count differs", "4 on ranks 0, 2", "6 on rank 1"});
  }
  SECTION("shape, with the same element count") {
    auto errors = mismatch_errors(2, [](int r) {
      return Submitted{6, DataType::f32, ReduceOp::avg, r ? std::vector<std::int64_t>{3, 2} : std::vector<std::int64_t>{2, 3}};
    });
    require_named(errors, {"tensor 'bad'", "shape differs", "[2, 3] on rank 0", "[3, 2] on rank 1"});
  }
  SECTION("type and shape at once: both named") {
    auto errors = mismatch_errors(2, [](int r) {
      return Submitted{4, r ? DataType::f64 : DataType::f32, ReduceOp::sum, r ? std::vector<std::int64_t>{4} : std::vector<std::int64_t>{2, 2}};
    });
    require_named(errors, {"type differs: fp32 on rank 0, fp64 on rank 1", "shape differs: [2, 2] on rank 0, [4] on rank 1"});
  }
}

TEST_CASE("fusion: a shape that does not hold the count is refused on the rank that gave it", "[comm][fusion][mismatch]") {
  run_ranks(1, [](Communicator& c, Failures& f) {
    float x[6] = {};
    try {
      c.enqueue_allreduce("x", x, 6, DataType::f32, ReduceOp::sum, {4, 2});
      f.add("a shape of 8 elements for a count of 6 was taken");
    } catch (const saker::Error& e) {
      if (std::string(e.what()).find("holds 8 elements, not 6") == std::string::npos) f.add(e.what());
    }
    c.enqueue_allreduce("x", x, 6, DataType::f32, ReduceOp::sum, {2, 3}).wait();
  }, fusion_options());
}

// The shape field is checked off the wire like the rest of a line (issue 28), and lines
// without one (older senders) still read.
TEST_CASE("fusion wire: a tensor line's shape is read, and refused when it is not dimensions", "[comm][fusion][intruder]") {
  const std::string sep(1, '\x1f');
  auto line = [&](const std::string& tail) { return "S0\ngrad" + sep + "6" + sep + "0" + sep + "0" + sep + tail + "\n"; };
  auto ok = fusion_wire::decode(line("1" + sep + "2,3"), "rank 1");
  REQUIRE(ok.items.size() == 1);
  CHECK(ok.items[0].second.shape == "2,3");
  CHECK(ok.expired.count("grad") == 1);
  auto old = fusion_wire::decode(line("0"), "rank 1");
  REQUIRE(old.items.size() == 1);
  CHECK(old.items[0].second.shape.empty());
  CHECK(old.expired.empty());
  for (const std::string& bad : {std::string("2;3"), std::string("-1"), std::string(300, '1')}) {
    INFO(bad);
    CHECK_THROWS_WITH(fusion_wire::decode(line("0" + sep + bad), "rank 1 (host h1)"), Catch::Contains("rank 1 (host h1)"));
  }
}
