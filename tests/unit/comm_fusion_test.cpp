#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "comm_test_support.hpp"

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
