#include "telemetry/counters_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace saker::telemetry {

void remove_counters_dir(const std::string& dir) noexcept {
  if (dir.empty()) return;
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  if (DIR* d = ::fdopendir(dfd)) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ::unlinkat(dfd, e->d_name, 0);
    ::closedir(d);
  } else {
    ::close(dfd);
  }
  ::rmdir(dir.c_str());
}

}  // namespace saker::telemetry
