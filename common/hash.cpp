#include "common/hash.hpp"

// xxHash compiled in (its header-only form), not linked: libxxhash.so was one more
// library for spank_saker.so to load into every slurmstepd. Same code path (the
// library's non-dispatching functions are the ones Saker called), same digests.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

#include "common/error.hpp"
#include "common/sha256.hpp"

namespace saker::hash {

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  const Sha256::Digest md = sha256(bytes);
  return to_hex(md.data(), md.size());
}

std::string hmac_sha256_hex(std::string_view key, std::string_view bytes) {
  const Sha256::Digest md = hmac_sha256(key, bytes);
  return to_hex(md.data(), md.size());
}

std::string Digest128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

Digest128 xxh3_128(const void* data, std::size_t size, std::uint64_t seed) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return {h.high64, h.low64};
}

Xxh3Stream::Xxh3Stream(std::uint64_t seed) : state_(XXH3_createState()) {
  if (state_ == nullptr) throw Error("xxh3: out of memory");
  XXH3_128bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed);
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::update(const void* data, std::size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

Digest128 Xxh3Stream::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.high64, h.low64};
}

}  // namespace saker::hash
