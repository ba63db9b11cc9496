#include "common/random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/hash.hpp"

namespace saker::random {

bool fill(void* out, std::size_t size) noexcept {
  auto* p = static_cast<unsigned char*>(out);
  while (size > 0) {
    // Blocks only until the pool is initialised at boot; a signal may cut a read short.
    const ssize_t n = ::getrandom(p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string job_key_hex() {
  unsigned char key[32];
  if (!fill(key, sizeof key)) return {};
  std::string hex = hash::to_hex(key, sizeof key);
  ::explicit_bzero(key, sizeof key);
  return hex;
}

}  // namespace saker::random
