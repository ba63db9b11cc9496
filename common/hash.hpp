// Hashes Saker relies on: SHA-256 for the tamper-evident audit chain and policy
// revisions (common/sha256.hpp: no OpenSSL, see why there), XXH3-128 for fast tensor
// checksums (xxHash, compiled in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace saker::hash {

// Lower-case hex SHA-256 of the bytes.
std::string sha256_hex(std::string_view bytes);

// Lower-case hex HMAC-SHA-256 of the bytes under `key` (the audit log's sealed head).
std::string hmac_sha256_hex(std::string_view key, std::string_view bytes);

struct Digest128 {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  bool operator==(const Digest128&) const = default;
  std::string hex() const;  // 32 lower-case hex digits, high word first
};

Digest128 xxh3_128(const void* data, std::size_t size, std::uint64_t seed = 0);

// Incremental XXH3-128, for data that arrives in pieces (streamed shards).
class Xxh3Stream {
 public:
  explicit Xxh3Stream(std::uint64_t seed = 0);
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, std::size_t size);
  Digest128 digest() const;

 private:
  void* state_;
};

std::string to_hex(const unsigned char* bytes, std::size_t size);

}  // namespace saker::hash
