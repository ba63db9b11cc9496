// Native alltoall (uneven splits) and allgather: exact results on every transport and
// world size, bit for bit through the node's shared memory (in rounds, interleaved with
// the other collectives on the same segment), and large two-rank transfers, sealed too.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "comm_alltoall_support.hpp"
#include "launcher/comm/stream_copy.hpp"

using namespace saker::comm;
using namespace saker::comm::test;

namespace {

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

}  // namespace

TEST_CASE("alltoall: uneven splits arrive exactly, every transport and world size", "[comm][alltoall]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size " << n);
    check_alltoall(n, Transport::shm);
    check_alltoall(n, Transport::ring);
    check_alltoall(n, Transport::hierarchical);
  }
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


// A call that outgrows this rank's share of the last-level cache copies its own block with
// non-temporal stores (stream_copy.hpp): the bytes must be the same, at odd sizes and
// offsets. Sized from this machine's cache so that the streamed copy is the one taken.
TEST_CASE("alltoall and allgather past the cache share (own block streamed): exact bytes", "[comm][alltoall][shm]") {
  const std::size_t share = stream_past(last_level_cache(), 2);
  if (share > (256u << 20)) {
    WARN("the last-level cache is unknown or over 512 MiB: no call here is large enough to stream");
    return;
  }
  run_ranks(2, [&](Communicator& c, Failures& f) {
    const int me = c.rank();
    const std::size_t rows = share / 4 / 8 + 4099;  // int64 rows: a call's 4 blocks pass the share
    auto rows_of = [&](int from, int to) { return rows + static_cast<std::size_t>(from + to); };  // uneven
    std::vector<std::size_t> sc{rows_of(me, 0), rows_of(me, 1)}, rc{rows_of(0, me), rows_of(1, me)};
    std::vector<std::int64_t> send;
    for (int j = 0; j < 2; ++j)
      for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)]; ++k) send.push_back(cell(me, j, k));
    std::vector<std::int64_t> got(rc[0] + rc[1], -1);
    for (int call = 0; call < 2; ++call) {  // single copy and the segment may each take one
      c.alltoallv(send.data(), sc, got.data(), rc, 1, DataType::i64, "streamed");
      std::size_t at = 0;
      for (int i = 0; i < 2; ++i)
        for (std::size_t k = 0; k < rc[static_cast<std::size_t>(i)]; ++k, ++at)
          if (got[at] != cell(i, me, k)) {
            f.add("alltoall: rank " + std::to_string(me) + " wrong element from rank " + std::to_string(i) + " at " +
                  std::to_string(k));
            return;
          }
    }
    const std::size_t part = share / 3 + 4099;  // bytes: a part and the whole output pass the share
    std::vector<unsigned char> mine(part), all(2 * part, 0);
    for (std::size_t k = 0; k < part; ++k) mine[k] = static_cast<unsigned char>(bits(me, 5, 5, k));
    c.allgather(mine.data(), all.data(), part);
    for (int i = 0; i < 2; ++i)
      for (std::size_t k = 0; k < part; ++k)
        if (all[static_cast<std::size_t>(i) * part + k] != static_cast<unsigned char>(bits(i, 5, 5, k))) {
          f.add("allgather: wrong byte from rank " + std::to_string(i) + " at " + std::to_string(k));
          return;
        }
  });
}
