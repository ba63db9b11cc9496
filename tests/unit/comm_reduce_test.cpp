#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "launcher/comm/reduce.hpp"

using namespace saker::comm;

TEST_CASE("fp16 and bf16 conversions round to nearest even and keep specials", "[comm][reduce]") {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 1e-7f})
    CHECK(reduce::half_to_float(reduce::float_to_half(f)) == Approx(f).margin(1e-7));
  CHECK(std::isinf(reduce::half_to_float(reduce::float_to_half(1e6f))));
  CHECK(std::isnan(reduce::half_to_float(reduce::float_to_half(NAN))));
  // 1 + 2^-11 is halfway between two halves: ties go to even (1.0).
  CHECK(reduce::half_to_float(reduce::float_to_half(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(reduce::bf16_to_float(reduce::float_to_bf16(3.0f)) == 3.0f);
  CHECK(reduce::bf16_to_float(reduce::float_to_bf16(1.0f + 0x1p-8f)) == 1.0f);  // tie to even
  CHECK(std::isnan(reduce::bf16_to_float(reduce::float_to_bf16(NAN))));
  // Every half survives the trip through float.
  for (unsigned h = 0; h < 0x7c00; ++h)
    REQUIRE(reduce::float_to_half(reduce::half_to_float(static_cast<unsigned short>(h))) == h);
}

TEST_CASE("fp16 accumulates in fp32 across inputs", "[comm][reduce]") {
  // 2048 + 1 + 1 is 2050 in fp32; pairwise fp16 rounding would give 2048.
  std::vector<unsigned short> a{reduce::float_to_half(2048)}, b{reduce::float_to_half(1)}, c{reduce::float_to_half(1)};
  const void* ins[] = {a.data(), b.data(), c.data()};
  unsigned short out;
  reduce::combine(&out, ins, 3, 1, DataType::f16, ReduceOp::sum);
  CHECK(reduce::half_to_float(out) == 2050.0f);
}

TEST_CASE("combine works when the output aliases any input", "[comm][reduce]") {
  std::vector<std::int64_t> a(5000, 1), b(5000, 2), c(5000, 3);
  const void* ins[] = {a.data(), b.data(), c.data()};
  reduce::combine(b.data(), ins, 3, b.size(), DataType::i64, ReduceOp::sum);
  CHECK(b.front() == 6);
  CHECK(b.back() == 6);
  std::vector<float> x{1, 5, -3}, y{2, 4, -7};
  reduce::accumulate(x.data(), y.data(), 3, DataType::f32, ReduceOp::max);
  CHECK(x == std::vector<float>{2, 5, -3});
  reduce::accumulate(x.data(), y.data(), 3, DataType::f32, ReduceOp::min);
  CHECK(x == std::vector<float>{2, 4, -7});
}
