#include "launcher/comm/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

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

// One pass over memory for native types: each vector of the result is folded from the
// inputs left to right (the same order as accumulate()), then stored to out (and also).
// Vector extensions rather than a plain loop: out may alias ins[0], and a loop with
// possible aliasing is left scalar by the vectoriser.
template <class T, ReduceOp Op>
__attribute__((target_clones("avx2", "default"))) void combine_native(T* out, T* also, const T* const* ins, int n,
                                                                      std::size_t count) {
  typedef T V __attribute__((vector_size(32)));
  constexpr std::size_t kLanes = sizeof(V) / sizeof(T);
  std::size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    V v;
    std::memcpy(&v, ins[0] + i, sizeof v);
    for (int k = 1; k < n; ++k) {
      V w;
      std::memcpy(&w, ins[k] + i, sizeof w);
      if constexpr (Op == ReduceOp::min) v = w < v ? w : v;
      else if constexpr (Op == ReduceOp::max) v = v < w ? w : v;
      else if constexpr (Op == ReduceOp::prod) v = v * w;
      else v = v + w;
    }
    std::memcpy(out + i, &v, sizeof v);
    if (also) std::memcpy(also + i, &v, sizeof v);
  }
  for (; i < count; ++i) {
    T v = ins[0][i];
    for (int k = 1; k < n; ++k) {
      T w = ins[k][i];
      if constexpr (Op == ReduceOp::min) v = w < v ? w : v;
      else if constexpr (Op == ReduceOp::max) v = v < w ? w : v;
      else if constexpr (Op == ReduceOp::prod) v = v * w;
      else v = v + w;
    }
    out[i] = v;
    if (also) also[i] = v;
  }
}

template <class T>
void combine_typed(void* out, void* also, const void* const* ins, int n, std::size_t count, ReduceOp op) {
  auto* o = static_cast<T*>(out);
  auto* a = static_cast<T*>(also);
  auto* in = reinterpret_cast<const T* const*>(ins);
  if (op == ReduceOp::min) combine_native<T, ReduceOp::min>(o, a, in, n, count);
  else if (op == ReduceOp::max) combine_native<T, ReduceOp::max>(o, a, in, n, count);
  else if (op == ReduceOp::prod) {
    // Integers multiply as their unsigned twins: the product wraps (as Horovod's C++
    // multiply does in practice) instead of being undefined behaviour on overflow.
    using M = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>, std::type_identity<T>>::type;
    combine_native<M, ReduceOp::prod>(reinterpret_cast<M*>(o), reinterpret_cast<M*>(a),
                                      reinterpret_cast<const M* const*>(in), n, count);
  } else combine_native<T, ReduceOp::sum>(o, a, in, n, count);
}

template <class T>
void acc_typed(void* a, const void* b, std::size_t n, ReduceOp op) {
  const void* ins[2] = {a, b};
  combine_typed<T>(a, nullptr, ins, 2, n, op);
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
void combine16(void* out, void* also, const void* const* ins, int n, std::size_t count, ReduceOp op) {
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
    if (also) std::memcpy(static_cast<unsigned short*>(also) + base, static_cast<unsigned short*>(out) + base, m * 2);
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
      return combine16<true>(acc, nullptr, ins, 2, count, op);
    }
    case DataType::bf16: {
      const void* ins[2] = {acc, in};
      return combine16<false>(acc, nullptr, ins, 2, count, op);
    }
  }
}

void combine(void* out, const void* const* ins, int n, std::size_t count, DataType type, ReduceOp op, void* also) {
  if (n <= 0) return;
  switch (type) {
    case DataType::f16: return combine16<true>(out, also, ins, n, count, op);
    case DataType::bf16: return combine16<false>(out, also, ins, n, count, op);
    case DataType::f32: return combine_typed<float>(out, also, ins, n, count, op);
    case DataType::f64: return combine_typed<double>(out, also, ins, n, count, op);
    case DataType::i32: return combine_typed<std::int32_t>(out, also, ins, n, count, op);
    case DataType::i64: return combine_typed<std::int64_t>(out, also, ins, n, count, op);
  }
}

namespace {
template <class T>
void fill(void* data, std::size_t count, T value) {
  std::fill_n(static_cast<T*>(data), count, value);
}
}  // namespace

void fill_identity(void* data, std::size_t count, DataType type, ReduceOp op) {
  if (op == ReduceOp::sum || op == ReduceOp::avg) {
    std::memset(data, 0, count * size_of(type));
    return;
  }
  if (op == ReduceOp::prod) {
    switch (type) {
      case DataType::f32: return fill<float>(data, count, 1.0f);
      case DataType::f64: return fill<double>(data, count, 1.0);
      case DataType::i32: return fill<std::int32_t>(data, count, 1);
      case DataType::i64: return fill<std::int64_t>(data, count, 1);
      case DataType::f16: return fill<unsigned short>(data, count, 0x3c00);
      case DataType::bf16: return fill<unsigned short>(data, count, 0x3f80);
    }
  }
  const bool min = op == ReduceOp::min;
  switch (type) {
    case DataType::f32: return fill<float>(data, count, min ? INFINITY : -INFINITY);
    case DataType::f64: return fill<double>(data, count, min ? INFINITY : -INFINITY);
    case DataType::i32: return fill<std::int32_t>(data, count, min ? INT32_MAX : INT32_MIN);
    case DataType::i64: return fill<std::int64_t>(data, count, min ? INT64_MAX : INT64_MIN);
    case DataType::f16: return fill<unsigned short>(data, count, min ? 0x7c00 : 0xfc00);
    case DataType::bf16: return fill<unsigned short>(data, count, min ? 0x7f80 : 0xff80);
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
