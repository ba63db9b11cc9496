// Encryption at rest: AES-256-GCM per tensor (OpenSSL libcrypto).
//
// Each tensor gets a fresh random 96-bit nonce; the additional authenticated data binds
// the ciphertext to its checkpoint step, shard and tensor name, so blobs cannot be
// swapped between tensors or checkpoints without failing authentication. The file records
// a key fingerprint (never the key), so a wrong key is named as such before any decryption.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace saker::ckpt::crypto {

inline constexpr const char* kCipherName = "aes-256-gcm";
inline constexpr std::size_t kNonceSize = 12;
inline constexpr std::size_t kTagSize = 16;

struct Key {
  std::array<unsigned char, 32> bytes{};
  std::string id;  // 16 hex digits of SHA-256("saker-ckpt key id\0" + key)
};

// Reads a key file: exactly 32 raw bytes or 64 hex digits (a trailing newline is allowed).
// Refuses a file that group or others can read or write (it must be 0600 or stricter),
// naming the file, its mode and the chmod to run.
Key load_key(const std::filesystem::path& file);

struct Sealed {
  std::vector<std::byte> ciphertext;  // same length as the plaintext
  std::array<unsigned char, kNonceSize> nonce{};
  std::array<unsigned char, kTagSize> tag{};
};

Sealed seal(const Key& key, std::span<const std::byte> plaintext, const std::string& aad);
// Writes the plaintext into `out` (same size as the ciphertext). Throws saker::Error when
// authentication fails (wrong key or tampered data), naming `what`.
void open(const Key& key, std::span<const std::byte> ciphertext, const unsigned char* nonce,
          const unsigned char* tag, const std::string& aad, std::span<std::byte> out, const std::string& what);

// Hex helpers for the nonce and tag attributes.
std::vector<unsigned char> from_hex(const std::string& hex, const std::string& what);

}  // namespace saker::ckpt::crypto
