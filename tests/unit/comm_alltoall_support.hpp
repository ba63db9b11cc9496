// Shared by the alltoall, reduce-scatter and refusal tests (comm_alltoall_test.cpp,
// comm_reduce_scatter_test.cpp, comm_agree_test.cpp): node layouts per transport, values
// that identify their sender, typed access to buffers, and the refusal harness.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm_test_support.hpp"
#include "launcher/comm/reduce.hpp"
#include "saker/error.hpp"

namespace saker::comm::test {

// Rows that rank `from` sends rank `to`: uneven, some zero.
inline std::size_t rows_between(int from, int to, int n) { return static_cast<std::size_t>((from * 3 + to * 5 + n) % 4); }

// Element k of the rows from -> to: identifies sender, receiver and position.
inline std::int64_t cell(int from, int to, std::size_t k) {
  return static_cast<std::int64_t>(from) * 1000000 + static_cast<std::int64_t>(to) * 10000 + static_cast<std::int64_t>(k);
}

inline std::vector<std::string> nodes_for(Transport t, int n) {
  std::vector<std::string> nodes;
  for (int r = 0; r < n; ++r)
    nodes.push_back(t == Transport::shm ? "a" : t == Transport::ring ? "n" + std::to_string(r) : (r % 2 ? "b" : "a"));
  return nodes;
}

// Rank `from`'s bits for rank `to` in round `it`: every float bit pattern (NaNs, -0,
// denormals) may occur, so only a bitwise copy passes.
inline std::uint32_t bits(int from, int to, int it, std::size_t k) {
  std::uint64_t x = (static_cast<std::uint64_t>(from) << 48) ^ (static_cast<std::uint64_t>(to) << 40) ^
                    (static_cast<std::uint64_t>(it) << 32) ^ k;
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint32_t>(x >> 29);
}

inline void put(void* p, std::size_t i, DataType t, double v) {
  switch (t) {
    case DataType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::f64: static_cast<double*>(p)[i] = v; break;
    case DataType::i32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
    case DataType::i64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
    case DataType::f16: static_cast<unsigned short*>(p)[i] = reduce::float_to_half(static_cast<float>(v)); break;
    case DataType::bf16: static_cast<unsigned short*>(p)[i] = reduce::float_to_bf16(static_cast<float>(v)); break;
  }
}

inline double get(const void* p, std::size_t i, DataType t) {
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

// Runs body on every rank and returns each rank's error text ("" when none).
inline std::vector<std::string> errors_of(int n, const std::function<void(Communicator&)>& body,
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

inline void require_same_refusal(const std::vector<std::string>& errs, const std::vector<std::string>& needles) {
  for (const std::string& e : errs) {
    INFO(e);
    REQUIRE(e == errs[0]);  // every rank throws the same text
    for (const std::string& needle : needles) REQUIRE(e.find(needle) != std::string::npos);
  }
}

}  // namespace saker::comm::test
