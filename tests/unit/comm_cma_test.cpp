// Single-copy alltoall and allgather between the ranks of one node (launcher/comm/cma.hpp):
// the same bits as through the segment, ragged counts with empty blocks, 2 and 3 ranks, and
// a read that fails (turned off at set-up, or failing in the middle of a call on one rank
// only) sends every member back to the segment, with the same bits, for good.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm_alltoall_support.hpp"
#include "launcher/comm/cma.hpp"

using namespace saker::comm;
using namespace saker::comm::test;

namespace {

// Sets an environment variable for a scope (the ranks are threads of this process).
struct EnvFor {
  const char* name;
  EnvFor(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvFor() { unsetenv(name); }
};

// Rows rank `from` sends `to` in call `it`: ragged, some zero (rows_between's pattern).
std::size_t rows_for(int from, int to, int n, int it) { return rows_between(from, to + it, n) * 3; }

// One round of every single-copy collective on a rank, everything it received in `out`:
// both alltoall forms (known counts, learned counts) and an allgather.
void round_of(Communicator& c, Failures& f, int it, std::size_t row, std::vector<std::uint32_t>& out) {
  const int n = c.size(), me = c.rank();
  std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(sc.size());
  std::vector<std::uint32_t> send;
  std::size_t total = 0;
  for (int j = 0; j < n; ++j) {
    sc[static_cast<std::size_t>(j)] = rows_for(me, j, n, it);
    rc[static_cast<std::size_t>(j)] = rows_for(j, me, n, it);
    total += rc[static_cast<std::size_t>(j)] * row;
    for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)] * row; ++k) send.push_back(bits(me, j, it, k));
  }
  std::vector<std::uint32_t> known(total + 1, 0xdeadbeef), learned;
  c.alltoallv(send.data(), sc, known.data(), rc, row, DataType::f32);
  c.alltoallv(send.data(), sc, row, DataType::f32, [&](const std::vector<std::size_t>& counts) {
    std::size_t rows = 0;
    for (std::size_t x : counts) rows += x;
    learned.assign(rows * row, 0xdeadbeef);
    return static_cast<void*>(learned.data());
  });
  if (known.back() != 0xdeadbeef) f.add("alltoall wrote past the receive buffer");
  known.pop_back();
  if (learned != known) f.add("the two alltoall forms differ on rank " + std::to_string(me));
  std::size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)] * row; ++k, ++at)
      if (known[at] != bits(i, me, it, k)) {
        f.add("rank " + std::to_string(me) + ", call " + std::to_string(it) + ": wrong bits from rank " +
              std::to_string(i) + " at " + std::to_string(k));
        return;
      }
  const std::size_t part = row * 7 + 1;  // odd: blocks not whole cache lines
  std::vector<std::uint32_t> mine(part), all(part * static_cast<std::size_t>(n) + 1, 0xdeadbeef);
  for (std::size_t k = 0; k < part; ++k) mine[k] = bits(me, -1, it, k);
  c.allgather(mine.data(), all.data(), part * 4);
  if (all.back() != 0xdeadbeef) f.add("allgather wrote past the receive buffer");
  all.pop_back();
  for (int i = 0; i < n; ++i)
    for (std::size_t k = 0; k < part; ++k)
      if (all[static_cast<std::size_t>(i) * part + k] != bits(i, -1, it, k)) {
        f.add("allgather: wrong bits from rank " + std::to_string(i));
        return;
      }
  out.insert(out.end(), known.begin(), known.end());
  out.insert(out.end(), all.begin(), all.end());
}

// Every rank's received bits over several rounds; between them, `between(comm, it)`.
std::vector<std::vector<std::uint32_t>> run_rounds(int n, const std::function<void(Communicator&, int)>& between = {}) {
  std::vector<std::vector<std::uint32_t>> out(static_cast<std::size_t>(n));
  run_ranks(n, [&](Communicator& c, Failures& f) {
    int it = 0;
    for (std::size_t row : {std::size_t{1}, std::size_t{1000}, std::size_t{300001}})
      for (int rep = 0; rep < 2; ++rep, ++it) {
        if (between) between(c, it);
        round_of(c, f, it, row, out[static_cast<std::size_t>(c.rank())]);
      }
  }, test::quick_options(), nodes_for(Transport::shm, n));
  return out;
}

std::uint64_t pulls() { return cma::counters().pulls.load(); }

}  // namespace

TEST_CASE("single copy: alltoall and allgather give the segment's bits, ragged with empty blocks, 2 and 3 ranks",
          "[comm][alltoall][cma]") {
  for (int n : {2, 3}) {
    INFO("world size " << n);
    std::vector<std::vector<std::uint32_t>> segment, single;
    {
      EnvFor off("SAKER_COMM_CMA", "0");
      const std::uint64_t before = pulls();
      segment = run_rounds(n);
      CHECK(pulls() == before);  // turned off: not one read
    }
    {
      EnvFor all("SAKER_COMM_CMA_MIN_BYTES", "1");  // every non-empty transfer by single copy
      const std::uint64_t before = pulls();
      single = run_rounds(n);
      CHECK(pulls() > before + 10);
    }
    REQUIRE(single == segment);
    {
      // The 300001-row rounds only, blocks of 3.6 MB to 10.8 MB: those of 8 MiB or more
      // through the segment, so a member may have left its first-round shares out for a
      // call that the largest block sends through the segment (alltoallv_start's flag).
      EnvFor large("SAKER_COMM_CMA_MIN_BYTES", "1048576");
      const std::uint64_t before = pulls();
      REQUIRE(run_rounds(n) == segment);
      CHECK(pulls() > before);
    }
    // By default alltoalls with blocks of 1-8 MiB take the path the group timed faster.
    REQUIRE(run_rounds(n) == segment);
  }
}

namespace {
// Calls of an alltoall whose blocks (1.2 MB, one size class) are in the timed range;
// every call's bits checked. How many of them went by single copy, and by the segment.
struct Paths {
  int single = 0, segment = 0;
};
Paths timed_calls(int n, int calls) {
  Paths p;
  run_ranks(n, [&](Communicator& c, Failures& f) {
    const int me = c.rank();
    auto rows = [&](int from, int to, int it) { return std::size_t{300000} + 1000 * static_cast<std::size_t>((from + to + it) % 3); };
    for (int it = 0; it < calls; ++it) {
      std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(sc.size());
      std::vector<std::uint32_t> send, recv;
      for (int j = 0; j < n; ++j) {
        sc[static_cast<std::size_t>(j)] = rows(me, j, it);
        rc[static_cast<std::size_t>(j)] = rows(j, me, it);
        for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)]; ++k) send.push_back(bits(me, j, it, k));
      }
      for (int i = 0; i < n; ++i) recv.resize(recv.size() + rc[static_cast<std::size_t>(i)], 0xdeadbeef);
      c.barrier();  // every member's previous call counted
      const std::uint64_t before = pulls();
      c.alltoallv(send.data(), sc, recv.data(), rc, 1, DataType::f32);
      c.barrier();
      if (me == 0) (pulls() == before ? p.segment : p.single) += 1;
      std::size_t at = 0;
      for (int i = 0; i < n; ++i)
        for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)]; ++k, ++at)
          if (recv[at] != bits(i, me, it, k)) {
            f.add("rank " + std::to_string(me) + ", call " + std::to_string(it) + ": wrong bits from rank " +
                  std::to_string(i) + " at " + std::to_string(k));
            return;
          }
    }
  }, test::quick_options(), nodes_for(Transport::shm, n));
  return p;
}
}  // namespace

TEST_CASE("single copy, timed: members whose own timings disagree still take the same path, with the segment's bits",
          "[comm][alltoall][cma]") {
  for (int n : {2, 3}) {
    INFO("world size " << n);
    {
      // Even members find single copy 100x slower, odd ones the segment: were each to
      // follow its own figures, from the first agreement on (the 17th call) they would
      // split, one pulling addresses the other never waits for (wrong bits, or a hang).
      cma::skew_timings_for_testing(true);
      const Paths p = timed_calls(n, 40);
      cma::skew_timings_for_testing(false);
      CHECK(p.single > 0);  // the first calls try each path in turn
      CHECK(p.segment > 0);
    }
    // Unskewed: both paths over repeated calls, the same bits (checked in every call).
    const Paths p = timed_calls(n, 24);
    CHECK(p.single >= 4);
    CHECK(p.segment >= 4);
  }
}

TEST_CASE("single copy: a read failing at set-up leaves the whole group on the segment", "[comm][alltoall][cma]") {
  EnvFor all("SAKER_COMM_CMA_MIN_BYTES", "1");
  std::vector<std::vector<std::uint32_t>> want;
  {
    EnvFor off("SAKER_COMM_CMA", "0");
    want = run_rounds(3);
  }
  cma::fail_next_pulls_for_testing(1);  // one member's probe of one peer fails
  const std::uint64_t failures = cma::counters().failures.load();
  std::uint64_t after_setup = 0;
  auto got = run_rounds(3, [&](Communicator& c, int it) {
    if (it != 0) return;
    c.barrier();  // every member is set up: no probe runs any more
    if (c.rank() == 0) after_setup = pulls();
    c.barrier();
  });
  REQUIRE(cma::counters().failures.load() == failures + 1);
  REQUIRE(got == want);
  CHECK(pulls() == after_setup);  // no member tried single copy
}

TEST_CASE("single copy: one rank's read failing mid-call redoes the call through the segment, then stays there",
          "[comm][alltoall][cma]") {
  EnvFor all("SAKER_COMM_CMA_MIN_BYTES", "1");
  std::vector<std::vector<std::uint32_t>> want;
  {
    EnvFor off("SAKER_COMM_CMA", "0");
    want = run_rounds(3);
  }
  const std::uint64_t failures = cma::counters().failures.load();
  std::uint64_t at_failure = 0;
  auto got = run_rounds(3, [&](Communicator& c, int it) {
    if (it != 3) return;  // a large round: each alltoall pulls from both peers
    c.barrier();
    if (c.rank() == 0) cma::fail_next_pulls_for_testing(1);  // whichever member reads first fails
    c.barrier();
    if (c.rank() == 0) at_failure = pulls();
  });
  REQUIRE(cma::counters().failures.load() == failures + 1);
  REQUIRE(got == want);
  // The failed call's other reads happened before the verdict; none after it. At most the
  // other two members' reads of that call: 2 each.
  CHECK(pulls() <= at_failure + 4);
}

TEST_CASE("single copy, timed: PathChoice tries each path in runs, leaves each run's first call out, then follows the pick",
          "[comm][alltoall][cma]") {
  cma::PathChoice c;
  const std::size_t bytes = 3u << 20;
  for (int call = 0; call < 16; ++call) {
    INFO("call " << call);
    REQUIRE_FALSE(c.agreement_due(bytes));
    const bool single = c.single(bytes);
    CHECK(single == ((call / 4) % 2 == 1));  // four of each in turn
    // A run's first call is slow (cold caches) and must not count; the others take `call`
    // s/byte, so the medians of the last four counted show which calls were counted.
    const double per_byte = call % 4 == 0 ? 1000.0 : call;
    c.record(bytes, single, per_byte * static_cast<double>(bytes));
  }
  REQUIRE(c.agreement_due(bytes));
  CHECK(c.figures(bytes) == std::array<double, 2>{9.5, 13.5});  // segment 3, 9-11; single 7, 13-15
  CHECK(c.figures(bytes / 8) == std::array<double, 2>{0.0, 0.0});  // another size class: untouched
  c.agree(bytes, true);
  for (int call = 16; call < 65; ++call) {
    INFO("call " << call);
    CHECK(c.single(bytes) == (call < 60 || call == 64));  // a run of the other path every 64th call
    CHECK(c.agreement_due(bytes) == (call % 16 == 0));
    c.record(bytes, c.single(bytes), static_cast<double>(bytes));
  }
}
