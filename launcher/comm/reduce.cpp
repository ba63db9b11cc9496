#include "launcher/comm/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

namespace saker::comm::reduce {

float half_to_float(unsigned short h) {
  std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400u));
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

unsigned short float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<unsigned short>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // overflow to inf
  if (ax < 0x38800000u) {  // subnormal or zero: round to nearest even
    float af;
    std::memcpy(&af, &ax, 4);
    af += 0.5f;  // adds 2^-1 so that the low bits hold the half subnormal (exact trick)
    std::uint32_t r;
    std::memcpy(&r, &af, 4);
    return static_cast<unsigned short>(sign | (r - 0x3f000000u));
  }
  std::uint32_t mant_odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent and round to nearest even
  return static_cast<unsigned short>(sign | (ax >> 13));
}

float bf16_to_float(unsigned short b) {
  std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

unsigned short float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((x >> 16) | 0x40u);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<unsigned short>(x >> 16);
}

void widen_f16c(float* out, const unsigned short* in, std::size_t n);
void narrow_f16c(unsigned short* out, const float* in, std::size_t n);

namespace {

// Native types: the compiler vectorises these loops; target_clones adds an AVX2 copy.
template <class T, ReduceOp Op>
__attribute__((target_clones("avx2", "default"))) void acc_native(T* __restrict a, const T* __restrict b,
                                                                   std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (Op == ReduceOp::min) a[i] = b[i] < a[i] ? b[i] : a[i];
    else if constexpr (Op == ReduceOp::max) a[i] = a[i] < b[i] ? b[i] : a[i];
    else a[i] = a[i] + b[i];
  }
}

template <class T>
void acc_typed(void* a, const void* b, std::size_t n, ReduceOp op) {
  auto* pa = static_cast<T*>(a);
  auto* pb = static_cast<const T*>(b);
  if (op == ReduceOp::min) acc_native<T, ReduceOp::min>(pa, pb, n);
  else if (op == ReduceOp::max) acc_native<T, ReduceOp::max>(pa, pb, n);
  else acc_native<T, ReduceOp::sum>(pa, pb, n);
}

constexpr std::size_t kBlock = 1024;  // fp32 scratch for 16-bit types, stays in L1

// 16-bit types: widen a block of each input to fp32, combine, narrow once.
template <bool Half>
void widen(float* out, const unsigned short* in, std::size_t n) {
  if constexpr (Half) {
    if (__builtin_cpu_supports("f16c")) {
      widen_f16c(out, in, n);
      return;
    }
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = Half ? half_to_float(in[i]) : bf16_to_float(in[i]);
}

template <bool Half>
void narrow(unsigned short* out, const float* in, std::size_t n) {
  if constexpr (Half) {
    if (__builtin_cpu_supports("f16c")) {
      narrow_f16c(out, in, n);
      return;
    }
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = Half ? float_to_half(in[i]) : float_to_bf16(in[i]);
}

template <bool Half>
void combine16(void* out, const void* const* ins, int n, std::size_t count, ReduceOp op) {
  alignas(64) float acc[kBlock];
  alignas(64) float tmp[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    std::size_t m = std::min(kBlock, count - base);
    widen<Half>(acc, static_cast<const unsigned short*>(ins[0]) + base, m);
    for (int k = 1; k < n; ++k) {
      widen<Half>(tmp, static_cast<const unsigned short*>(ins[k]) + base, m);
      acc_typed<float>(acc, tmp, m, op);
    }
    narrow<Half>(static_cast<unsigned short*>(out) + base, acc, m);
  }
}

}  // namespace

__attribute__((target("f16c,avx"))) void widen_f16c(float* out, const unsigned short* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

__attribute__((target("f16c,avx"))) void narrow_f16c(unsigned short* out, const float* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

void accumulate(void* acc, const void* in, std::size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::f32: return acc_typed<float>(acc, in, count, op);
    case DataType::f64: return acc_typed<double>(acc, in, count, op);
    case DataType::i32: return acc_typed<std::int32_t>(acc, in, count, op);
    case DataType::i64: return acc_typed<std::int64_t>(acc, in, count, op);
    case DataType::f16: {
      const void* ins[2] = {acc, in};
      return combine16<true>(acc, ins, 2, count, op);
    }
    case DataType::bf16: {
      const void* ins[2] = {acc, in};
      return combine16<false>(acc, ins, 2, count, op);
    }
  }
}

void combine(void* out, const void* const* ins, int n, std::size_t count, DataType type, ReduceOp op) {
  if (type == DataType::f16) return combine16<true>(out, ins, n, count, op);
  if (type == DataType::bf16) return combine16<false>(out, ins, n, count, op);
  if (n <= 0) return;
  // Block-wise through an L1-sized scratch, so that out may alias any input.
  std::size_t es = size_of(type);
  alignas(64) char scratch[16384];
  std::size_t block = sizeof scratch / es;
  for (std::size_t base = 0; base < count; base += block) {
    std::size_t m = std::min(block, count - base);
    std::memcpy(scratch, static_cast<const char*>(ins[0]) + base * es, m * es);
    for (int k = 1; k < n; ++k) accumulate(scratch, static_cast<const char*>(ins[k]) + base * es, m, type, op);
    std::memcpy(static_cast<char*>(out) + base * es, scratch, m * es);
  }
}

void scale_for_avg(void* data, std::size_t count, DataType type, int n) {
  switch (type) {
    case DataType::f32: { auto* p = static_cast<float*>(data); float d = static_cast<float>(n);
      for (std::size_t i = 0; i < count; ++i) p[i] = p[i] / d;
      return; }
    case DataType::f64: { auto* p = static_cast<double*>(data); double d = n;
      for (std::size_t i = 0; i < count; ++i) p[i] = p[i] / d;
      return; }
    case DataType::i32: { auto* p = static_cast<std::int32_t*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= n;
      return; }
    case DataType::i64: { auto* p = static_cast<std::int64_t*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= n;
      return; }
    case DataType::f16: { auto* p = static_cast<unsigned short*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(n));
      return; }
    case DataType::bf16: { auto* p = static_cast<unsigned short*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(n));
      return; }
  }
}

}  // namespace saker::comm::reduce
