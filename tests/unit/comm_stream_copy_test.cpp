// copy_streaming / copy_within (stream_copy.hpp): every alignment of either end and every
// length class give the source's bytes and touch nothing past the destination; overlapping
// and in-place ranges fall back to memmove; and where streaming starts (stream_past).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "launcher/comm/stream_copy.hpp"

using saker::comm::Cache;
using saker::comm::copy_streaming;
using saker::comm::copy_within;
using saker::comm::stream_past;

namespace {

std::vector<char> pattern(std::size_t n, int seed) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + static_cast<std::size_t>(seed) * 7) % 251);
  return v;
}

}  // namespace

TEST_CASE("copy_streaming: any alignment and length, exact bytes, nothing written past the end", "[comm][copy]") {
  constexpr std::size_t kGuard = 64;
  for (std::size_t len : {0u, 1u, 15u, 16u, 17u, 63u, 64u, 65u, 1000u, 65537u})
    for (std::size_t dst_off = 0; dst_off < 16; ++dst_off)
      for (std::size_t src_off : {0u, 1u, 7u, 8u, 15u}) {
        const std::vector<char> src = pattern(len + src_off + 1, 1);  // never empty: memcmp takes no null
        std::vector<char> dst = pattern(len + dst_off + 2 * kGuard, 2);
        const std::vector<char> before = dst;
        copy_streaming(dst.data() + kGuard + dst_off, src.data() + src_off, len);
        INFO("len " << len << " dst offset " << dst_off << " src offset " << src_off);
        CHECK(std::memcmp(dst.data() + kGuard + dst_off, src.data() + src_off, len) == 0);
        CHECK(std::memcmp(dst.data(), before.data(), kGuard + dst_off) == 0);
        CHECK(std::memcmp(dst.data() + kGuard + dst_off + len, before.data() + kGuard + dst_off + len, kGuard) == 0);
      }
}

TEST_CASE("copy_within: streamed or not, the bytes of memmove, overlapping and in place too", "[comm][copy]") {
  for (bool stream : {false, true})
    for (std::ptrdiff_t shift : {-100, -1, 0, 1, 100, 5000}) {
      INFO("stream " << stream << " destination shifted by " << shift);
      std::vector<char> got = pattern(20000, 3), want = got;
      char* src = got.data() + 6000;
      std::memmove(want.data() + 6000 + shift, want.data() + 6000, 4096);
      copy_within(src + shift, src, 4096, stream);
      CHECK(got == want);
    }
}

TEST_CASE("stream_past: this rank's share of the last-level cache, never when unknown", "[comm][copy]") {
  CHECK(stream_past(Cache{}, 2) == std::numeric_limits<std::size_t>::max());
  CHECK(stream_past(Cache{32u << 20, 16}, 2) == 16u << 20);  // two ranks share it
  CHECK(stream_past(Cache{32u << 20, 2}, 8) == 16u << 20);   // no more sharers than its CPUs
  CHECK(stream_past(Cache{32u << 20, 0}, 4) == 8u << 20);    // CPUs unknown: the ranks
  CHECK(stream_past(Cache{32u << 20, 16}, 1) == 32u << 20);
}
