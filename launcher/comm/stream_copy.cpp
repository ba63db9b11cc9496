#include "launcher/comm/stream_copy.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace saker::comm {

void copy_streaming(char* dst, const char* src, std::size_t bytes) noexcept {
  std::size_t i = 0;
  while (i < bytes && reinterpret_cast<std::uintptr_t>(dst + i) % 16 != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

void copy_within(char* dst, const char* src, std::size_t bytes, bool stream) noexcept {
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  if (stream && (d + bytes <= s || s + bytes <= d)) copy_streaming(dst, src, bytes);
  else if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

std::size_t stream_past(Cache cache, int members) {
  if (cache.bytes == 0) return std::numeric_limits<std::size_t>::max();
  const int sharing = std::max(1, std::min(members, cache.cpus > 0 ? cache.cpus : members));
  return cache.bytes / static_cast<std::size_t>(sharing);
}

}  // namespace saker::comm
