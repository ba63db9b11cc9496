#include "ckpt/ordered_sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "provenance/text.hpp"

namespace saker::ckpt {

OrderedSha256::OrderedSha256(int fd, bool drop_behind) : fd_(fd), ctx_(EVP_MD_CTX_new()), drop_behind_(drop_behind) {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}

OrderedSha256::~OrderedSha256() { EVP_MD_CTX_free(ctx_); }

bool OrderedSha256::hash_range(std::uint64_t from, std::uint64_t to) {
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min<std::uint64_t>(to - from, std::uint64_t{1} << 20)));
  while (from < to) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), to - from));
    const ssize_t n = ::pread(fd_, buf.data(), want, static_cast<off_t>(from));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return to == UINT64_MAX;  // the end of the file: expected only when hashing the tail
    if (EVP_DigestUpdate(ctx_, buf.data(), static_cast<std::size_t>(n)) != 1) return false;
    if (drop_behind_) ::posix_fadvise(fd_, static_cast<off_t>(from), n, POSIX_FADV_DONTNEED);
    from += static_cast<std::uint64_t>(n);
    extra_ += static_cast<std::uint64_t>(n);
  }
  return true;
}

void OrderedSha256::piece(std::uint64_t at, const std::byte* p, std::size_t n) {
  if (!ok_ || at + n <= upto_) return;  // already hashed, as part of what lay between earlier pieces
  if (at < upto_) {                     // its head was: hash the rest
    p += upto_ - at;
    n -= static_cast<std::size_t>(upto_ - at);
    at = upto_;
  }
  ok_ = hash_range(upto_, at) && EVP_DigestUpdate(ctx_, p, n) == 1;
  upto_ = at + n;
}

std::optional<std::string> OrderedSha256::finish() {
  if (!ok_ || !hash_range(upto_, UINT64_MAX)) return std::nullopt;
  ok_ = false;  // once
  unsigned char md[32];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &len) != 1 || len != 32) return std::nullopt;
  return saker::provenance::hex(std::string_view(reinterpret_cast<const char*>(md), 32));
}

}  // namespace saker::ckpt
