#include "launcher/run/heartbeat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"

namespace saker::run {

HeartbeatWriter::HeartbeatWriter(int rank) {
  const char* dir = std::getenv(kHeartbeatDirEnv);
  if (dir != nullptr && *dir != '\0') path_ = std::string(dir) + "/rank-" + std::to_string(rank);
}

void HeartbeatWriter::beat() {
  if (path_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_ != std::chrono::steady_clock::time_point{} && now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  // Best effort: a heartbeat that cannot be written must not stop training (the worst
  // case is that saker-run does not watch this rank). 0600 and never through a symlink:
  // the directory is saker-run's private one (runtime_dir.hpp).
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  ::futimens(fd, nullptr);
  ::close(fd);
}

std::optional<StaleRank> stale_heartbeat(const std::string& dir, double now, double limit_s) {
  std::optional<StaleRank> worst;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0) continue;
    char* end = nullptr;
    const long rank = std::strtol(name.c_str() + 5, &end, 10);
    if (end == name.c_str() + 5 || *end != '\0' || rank < 0) continue;
    // Only a regular file of this user's counts: nothing another user could have planted.
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const double silent = now - (static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9);
    if (silent > limit_s && (!worst || silent > worst->silent_s)) worst = StaleRank{static_cast<int>(rank), silent};
  }
  return worst;
}

}  // namespace saker::run
