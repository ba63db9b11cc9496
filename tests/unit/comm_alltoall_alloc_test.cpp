// A small alltoall or reduce-scatter between the ranks of one node costs a barrier and a
// few copies (issue 29: 1 KiB at OpenMPI's speed); a heap allocation per call (a vector
// of offsets, a declaration table) is a good part of that. This binary replaces the
// global operator new with one that counts, per thread (every rank is a thread, and a
// synchronous collective runs on its caller's), and checks that once warm these calls
// allocate nothing. Its own binary, so the replacement touches no other test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "comm_alltoall_support.hpp"

namespace {
thread_local std::size_t news = 0;

void* counted(std::size_t bytes) {
  ++news;
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(std::size_t bytes, std::align_val_t align) {
  ++news;
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, std::max(a, (bytes + a - 1) / a * a))) return p;  // a multiple of a
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t bytes) { return counted(bytes); }
void* operator new[](std::size_t bytes) { return counted(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  ++news;
  return std::malloc(bytes ? bytes : 1);
}
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  ++news;
  return std::malloc(bytes ? bytes : 1);
}
void* operator new(std::size_t bytes, std::align_val_t a) { return counted_aligned(bytes, a); }
void* operator new[](std::size_t bytes, std::align_val_t a) { return counted_aligned(bytes, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace saker::comm;
using namespace saker::comm::test;

namespace {

// Runs `call` warm-up times, then `calls` times, and reports how many allocations the
// counted calls made on this thread (a failure names the op, the size and the rank).
template <class F>
void expect_no_allocation(Failures& f, int rank, const std::string& what, F call) {
  for (int i = 0; i < 3; ++i) call();
  const std::size_t before = news;
  constexpr int calls = 20;
  for (int i = 0; i < calls; ++i) call();
  const std::size_t made = news - before;
  if (made > 0)
    f.add("rank " + std::to_string(rank) + ": " + std::to_string(made) + " heap allocations in " + std::to_string(calls) +
          " steady-state " + what);
}

}  // namespace

TEST_CASE("the counting operator new sees this thread's allocations", "[comm][alloc]") {
  const std::size_t before = news;
  auto* v = new std::vector<int>(100);
  REQUIRE(news - before == 2);
  delete v;
}

TEST_CASE("a steady-state alltoall or reduce_scatter inside one node allocates nothing",
          "[comm][alltoall][reduce_scatter][shm][alloc]") {
  for (int n : {2, 3}) {
    INFO("world size " << n);
    Options o = test::quick_options();
    o.transport = Transport::shm;
    run_ranks(n, [&](Communicator& c, Failures& f) {
      const int me = c.rank();
      for (std::size_t bytes : {std::size_t{1024}, std::size_t{4096}, std::size_t{64} << 10}) {
        const std::size_t part = bytes / 4 / static_cast<std::size_t>(n);
        const std::vector<std::size_t> counts(static_cast<std::size_t>(n), part);
        std::vector<float> send(part * static_cast<std::size_t>(n), static_cast<float>(me + 1)), all(send.size()),
            mine(part);
        const std::string at = " of " + std::to_string(bytes) + " bytes";
        expect_no_allocation(f, me, "alltoalls" + at,
                             [&] { c.alltoallv(send.data(), counts, all.data(), counts, 1, DataType::f32, "a"); });
        for (std::size_t i = 0; i < all.size(); ++i)
          if (all[i] != static_cast<float>(i / part + 1)) f.add("alltoall" + at + ": wrong value at " + std::to_string(i));
        expect_no_allocation(f, me, "reduce_scatters" + at,
                             [&] { c.reduce_scatter(send.data(), mine.data(), counts, DataType::f32, ReduceOp::sum, "r"); });
        expect_no_allocation(f, me, "averaging reduce_scatters" + at,
                             [&] { c.reduce_scatter(send.data(), mine.data(), counts, DataType::f32, ReduceOp::avg); });
        for (float x : mine)
          if (x != static_cast<float>(n + 1) / 2) f.add("reduce_scatter" + at + ": " + std::to_string(x));
      }
    }, o, nodes_for(Transport::shm, n));
  }
}

// The reused declarations must not make a later disagreement pass: after steady-state
// calls, one rank changes its counts and every rank refuses with the same text; the next
// agreeing calls give the right values and still allocate nothing.
TEST_CASE("a mismatch after steady-state calls still refuses on every rank",
          "[comm][alltoall][reduce_scatter][shm][alloc][mismatch]") {
  const int n = 3;
  std::vector<std::string> a2a(n), rs(n);
  Options o = test::quick_options();
  o.transport = Transport::shm;
  run_ranks(n, [&](Communicator& c, Failures& f) {
    const int me = c.rank();
    const std::vector<std::size_t> counts(n, 4), odd{4, 4, me == 2 ? std::size_t{5} : std::size_t{4}};
    std::vector<float> send(3 * 5, static_cast<float>(me + 1)), all(send.size()), mine(5);
    auto a2a_with = [&](const std::vector<std::size_t>& sc) {
      c.alltoallv(send.data(), sc, all.data(), counts, 1, DataType::f32, "a");
    };
    auto rs_with = [&](const std::vector<std::size_t>& k) {
      c.reduce_scatter(send.data(), mine.data(), k, DataType::f32, ReduceOp::sum, "r");
    };
    for (int i = 0; i < 5; ++i) {
      a2a_with(counts);
      rs_with(counts);
    }
    try {
      a2a_with(odd);
    } catch (const saker::Error& e) {
      a2a[static_cast<std::size_t>(me)] = e.what();
    }
    try {
      rs_with(odd);
    } catch (const saker::Error& e) {
      rs[static_cast<std::size_t>(me)] = e.what();
    }
    expect_no_allocation(f, me, "alltoalls after a refusal", [&] { a2a_with(counts); });
    expect_no_allocation(f, me, "reduce_scatters after a refusal", [&] { rs_with(counts); });
    for (std::size_t i = 0; i < 12; ++i)
      if (all[i] != static_cast<float>(i / 4 + 1)) f.add("alltoall after the refusal: wrong value at " + std::to_string(i));
    for (std::size_t i = 0; i < 4; ++i)
      if (mine[i] != 6.0f) f.add("reduce_scatter after the refusal: " + std::to_string(mine[i]));
  }, o, nodes_for(Transport::shm, n));
  require_same_refusal(a2a, {"alltoall of 'a' refused on every rank", "rank 2 expects 4 rows from rank 2, which sends it 5"});
  require_same_refusal(rs, {"reduce_scatter of 'r' refused on every rank", "the counts differ", "rank 2 [4, 4, 5]"});
}
