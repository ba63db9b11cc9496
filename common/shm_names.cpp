#include "common/shm_names.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/random.hpp"

namespace saker::shm_names {
namespace {

constexpr const char* kPrefix = "/saker-";
constexpr std::size_t kRandomBytes = 16;  // 128 bits

bool all_of(const std::string& s, std::size_t from, std::size_t to, const char* allowed) {
  return std::all_of(s.begin() + static_cast<long>(from), s.begin() + static_cast<long>(to),
                     [&](char c) { return std::strchr(allowed, c) != nullptr; });
}

}  // namespace

std::string fresh() {
  unsigned char bits[kRandomBytes];
  if (!random::fill(bits, sizeof bits))
    throw Error(explain("cannot draw a random name for a shared-memory segment", std::strerror(errno),
                        "check that the kernel offers getrandom(2), or set SAKER_COMM_TRANSPORT=ring"));
  std::string name = kPrefix + std::to_string(::getpid()) + "-";
  static const char* hex = "0123456789abcdef";
  for (unsigned char b : bits) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

bool well_formed(const std::string& name) {
  const std::size_t start = std::strlen(kPrefix);
  if (name.compare(0, start, kPrefix) != 0) return false;
  const std::size_t dash = name.find('-', start);
  if (dash == std::string::npos || dash == start || dash - start > 10) return false;
  return all_of(name, start, dash, "0123456789") && name.size() - dash - 1 == 2 * kRandomBytes &&
         all_of(name, dash + 1, name.size(), "0123456789abcdef");
}

bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const auto stat = file::read("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;  // no /proc: trust kill()
  const std::size_t paren = stat->rfind(')');  // the command name may hold spaces and ')'
  return paren != std::string::npos && paren + 2 < stat->size() && ((*stat)[paren + 2] == 'Z' || (*stat)[paren + 2] == 'X');
}

int sweep_stale() noexcept {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = std::string("/") + e->d_name;
    struct stat st {};
    if (!well_formed(name) || ::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // Only our own files, and only once their creator is gone: a live creator's name
    // lasts until its members mapped it.
    const int pid = std::atoi(name.c_str() + std::strlen(kPrefix));
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || pid <= 0 || !process_gone(pid)) continue;
    if (::shm_unlink(name.c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

}  // namespace saker::shm_names
