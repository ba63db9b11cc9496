#include "common/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace saker::file {

std::optional<std::string> read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  struct stat st {};
  // /proc files report size 0: read until EOF whatever fstat says.
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      bytes.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int e = errno;
      ::close(fd);
      errno = e;
      return std::nullopt;
    }
  }
  ::close(fd);
  return bytes;
}

int open_private(const std::string& path, int how, unsigned mode, std::string* why) {
  const int flags = O_WRONLY | O_NOFOLLOW | O_CLOEXEC | (how & O_APPEND);
  int fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL, static_cast<mode_t>(mode));
  if (fd < 0 && errno == EEXIST) fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    *why = errno == ELOOP ? "it is a symbolic link" : std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    *why = "it exists and is not a regular file of this user (owner uid " + std::to_string(st.st_uid) + ")";
    ::close(fd);
    return -1;
  }
  // The umask may have narrowed the mode, an older file may be wider: exactly `mode`.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0 || ((how & O_TRUNC) != 0 && ::ftruncate(fd, 0) != 0)) {
    *why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace saker::file
