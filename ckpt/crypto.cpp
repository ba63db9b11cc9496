#include "ckpt/crypto.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace saker::ckpt::crypto {
namespace {

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

CipherCtx new_ctx() {
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  if (!ctx) throw Error("saker-ckpt: OpenSSL could not allocate a cipher context (out of memory)");
  return ctx;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// OpenSSL takes int lengths; tensors can be larger, so feed it in pieces.
constexpr std::size_t kPiece = std::size_t{1} << 30;

}  // namespace

std::vector<unsigned char> from_hex(const std::string& hex, const std::string& what) {
  if (hex.size() % 2 != 0) throw Error(what + ": odd-length hex string");
  std::vector<unsigned char> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) throw Error(what + ": not a hex string");
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return out;
}

Key load_key(const std::filesystem::path& file) {
  struct stat st{};
  if (::stat(file.c_str(), &st) != 0)
    throw Error(explain("encryption key " + file.string() + " cannot be read", "the file does not exist",
                        "create it: head -c 32 /dev/urandom > KEY && chmod 600 KEY"));
  if (S_ISDIR(st.st_mode))
    throw Error(explain("encryption key " + file.string() + " is a directory", "a key is one file of 32 bytes",
                        "name the key file, or create one: head -c 32 /dev/urandom > KEY && chmod 600 KEY"));
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    throw Error(explain("encryption key " + file.string() + " is not private",
                        std::string("its mode is ") + mode + ", so other users can read or change it",
                        "chmod 600 " + file.string()));
  }
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    throw Error(explain("encryption key " + file.string() + " cannot be read", "I/O error", "check the file"));
  Key key;
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == '\r')) trimmed.pop_back();
  if (text.size() == 32) {
    std::copy(text.begin(), text.end(), reinterpret_cast<char*>(key.bytes.data()));
  } else if (trimmed.size() == 64 && trimmed.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
    auto raw = from_hex(trimmed, "encryption key " + file.string());
    std::copy(raw.begin(), raw.end(), key.bytes.begin());
  } else {
    throw Error(explain("encryption key " + file.string() + " is malformed",
                        "it holds " + std::to_string(text.size()) + " bytes; a key is 32 raw bytes or 64 hex digits",
                        "head -c 32 /dev/urandom > KEY && chmod 600 KEY"));
  }
  std::string material = std::string("saker-ckpt key id") + '\0' +
                         std::string(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
  key.id = hash::sha256_hex(material).substr(0, 16);
  return key;
}

Sealed seal(const Key& key, std::span<const std::byte> plaintext, const std::string& aad) {
  Sealed out;
  if (RAND_bytes(out.nonce.data(), static_cast<int>(out.nonce.size())) != 1)
    throw Error("saker-ckpt: OpenSSL RAND_bytes failed: no randomness for the encryption nonce");
  auto ctx = new_ctx();
  int len = 0;
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes.data(), out.nonce.data()) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1)
    throw Error("saker-ckpt: AES-256-GCM initialisation failed (OpenSSL)");
  out.ciphertext.resize(plaintext.size());
  auto* dst = reinterpret_cast<unsigned char*>(out.ciphertext.data());
  const auto* src = reinterpret_cast<const unsigned char*>(plaintext.data());
  for (std::size_t off = 0; off < plaintext.size(); off += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, plaintext.size() - off));
    if (EVP_EncryptUpdate(ctx.get(), dst + off, &len, src + off, n) != 1 || len != n)
      throw Error("saker-ckpt: AES-256-GCM encryption failed (OpenSSL)");
  }
  if (EVP_EncryptFinal_ex(ctx.get(), dst + plaintext.size(), &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagSize, out.tag.data()) != 1)
    throw Error("saker-ckpt: AES-256-GCM finalisation failed (OpenSSL)");
  return out;
}

void open(const Key& key, std::span<const std::byte> ciphertext, const unsigned char* nonce,
          const unsigned char* tag, const std::string& aad, std::span<std::byte> out, const std::string& what) {
  auto ctx = new_ctx();
  int len = 0;
  if (EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1)
    throw Error("saker-ckpt: AES-256-GCM initialisation failed (OpenSSL)");
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  const auto* src = reinterpret_cast<const unsigned char*>(ciphertext.data());
  for (std::size_t off = 0; off < ciphertext.size(); off += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, ciphertext.size() - off));
    if (EVP_DecryptUpdate(ctx.get(), dst + off, &len, src + off, n) != 1)
      throw Error("saker-ckpt: AES-256-GCM decryption failed (OpenSSL)");
  }
  unsigned char tag_copy[kTagSize];
  std::copy(tag, tag + kTagSize, tag_copy);
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagSize, tag_copy) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), dst + ciphertext.size(), &len) != 1) {
    // Zero what was decrypted: unauthenticated plaintext must never reach the caller.
    std::fill(out.begin(), out.end(), std::byte{0});
    throw Error(explain(what + ": decryption failed", "the authentication tag does not match (wrong key or tampered data)",
                        "use the key this checkpoint was written with"));
  }
}

}  // namespace saker::ckpt::crypto
