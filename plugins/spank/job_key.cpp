#include "plugins/spank/job_key.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/random.hpp"

namespace saker::spank {
namespace {

bool is_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::string ensure_step_job_key() noexcept {
  try {
    if (is_set(kJobKeyEnv) || is_set(kJobKeyFileEnv)) return "";
    const std::string key = random::job_key_hex();
    if (key.empty()) return std::string("the kernel gave no random bytes (getrandom: ") + std::strerror(errno) + ")";
    if (::setenv(kJobKeyEnv, key.c_str(), 0) != 0) return std::string("setenv failed: ") + std::strerror(errno);
    return "";
  } catch (...) {
    return "out of memory";
  }
}

}  // namespace saker::spank
