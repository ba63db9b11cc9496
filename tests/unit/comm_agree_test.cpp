// The cross-rank declarations of alltoall and reduce-scatter (agree.hpp): a rank that
// disagrees (type, row size, op, counts, another collective) makes every rank throw the
// same error naming the ranks and their values, before any data reached a receive
// buffer, and the communicator stays usable.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "comm_alltoall_support.hpp"

using namespace saker::comm;
using namespace saker::comm::test;

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
  // One node: the declarations share the first round's barrier with the data (as
  // alltoall's); a refused reduce_scatter must still leave recv untouched.
  SECTION("nothing reaches the receive buffer of a refused reduce_scatter, on 3 ranks") {
    std::atomic<int> written{0};
    auto errs = errors_of(3, [&](Communicator& c) {
      std::vector<float> send(300, 5.0f), recv(100, -7.0f);
      try {
        c.reduce_scatter(send.data(), recv.data(), {100, 100, 100}, DataType::f32,
                         c.rank() == 2 ? ReduceOp::max : ReduceOp::sum, "r");
      } catch (...) {
        for (float x : recv) written += x != -7.0f ? 1 : 0;
        throw;
      }
    });
    require_same_refusal(errs, {"reduce_scatter of 'r'", "op differs", "rank 2 max"});
    REQUIRE(written == 0);
  }
  SECTION("an asynchronous refusal fails the handle only") {
    auto errs = errors_of(2, [](Communicator& c) {
      std::vector<float> send(4), recv(4);
      c.reduce_scatter_async(send.data(), recv.data(), {2, 2}, DataType::f32, c.rank() ? ReduceOp::prod : ReduceOp::sum).wait();
    });
    require_same_refusal(errs, {"op differs", "rank 1 prod"});
  }
}
