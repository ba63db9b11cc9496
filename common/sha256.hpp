// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), self-contained.
//
// Why not OpenSSL's: spank_saker.so hashes audit records inside slurmstepd, which Slurm
// starts afresh for every step on every node. Loading libcrypto there (4.7 MB, about
// 21,000 relocations resolved against slurmstepd's global scope) cost about 1.1 ms of CPU
// per slurmstepd, the largest part of the plugin's step-launch overhead. These ~100
// lines cost nothing to load. They are checked against the FIPS/RFC vectors and, on
// thousands of random inputs, against OpenSSL (tests/unit/common_sha256_test.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace saker::hash {

class Sha256 {
 public:
  using Digest = std::array<unsigned char, 32>;

  Sha256();
  void update(std::string_view bytes);
  Digest finish();  // the object is spent afterwards

 private:
  void compress(const unsigned char* block);

  std::array<std::uint32_t, 8> state_;
  std::array<unsigned char, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Sha256::Digest sha256(std::string_view bytes);
Sha256::Digest hmac_sha256(std::string_view key, std::string_view bytes);

}  // namespace saker::hash
