#include "launcher/run/heartbeat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
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

void HeartbeatWriter::phase(const char* name) const {
  if (path_.empty()) return;
  const std::string file = path_ + "." + name;
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
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

namespace {

// mtime of `path` if it is a regular file of this user (never followed).
std::optional<double> own_mtime(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return std::nullopt;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

}  // namespace

std::map<int, double> heartbeat_times(const std::string& dir) {
  std::map<int, double> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0) continue;
    char* end = nullptr;
    const long rank = std::strtol(name.c_str() + 5, &end, 10);
    if (end == name.c_str() + 5 || *end != '\0' || rank < 0) continue;
    if (auto t = own_mtime(entry.path().string())) out[static_cast<int>(rank)] = *t;
  }
  return out;
}

std::optional<double> phase_time(const std::string& dir, int rank, const std::string& name) {
  return own_mtime(dir + "/rank-" + std::to_string(rank) + "." + name);
}

void HangLimit::observe(const std::map<int, double>& times) {
  for (const auto& [rank, t] : times) {
    auto it = last_.find(rank);
    if (it == last_.end()) {
      last_[rank] = t;
      continue;
    }
    if (t <= it->second) continue;
    // The first interval of an attempt spans loading and resuming, not a step.
    if (++beats_[rank] > 1 && t - it->second > slowest_) slowest_ = t - it->second;
    it->second = t;
  }
}

double HangLimit::limit() const {
  if (fixed_s_ >= 0) return fixed_s_;
  bool warm = !beats_.empty();
  for (const auto& [rank, n] : beats_) warm = warm && n > kWarmupBeats;
  if (!warm && slowest_ == 0) return kStartupSeconds;
  if (!warm) return std::max(kStartupSeconds, kFactor * slowest_);  // a restarted rank loads again
  return std::max(kFloorSeconds, kFactor * slowest_);
}

std::string HangLimit::basis() const {
  if (fixed_s_ >= 0) return "--hang-timeout " + seconds_text(fixed_s_) + " s";
  if (limit() == kStartupSeconds && slowest_ == 0) {
    return "derived: the start-up allowance of " + seconds_text(kStartupSeconds) + " s until the ranks have beaten " +
           std::to_string(kWarmupBeats) + " times";
  }
  return "derived: " + seconds_text(kFactor) + " x the slowest step interval seen, " + seconds_text(slowest_) +
         " s, at least " + seconds_text(kFloorSeconds) + " s; --hang-timeout N fixes it";
}

}  // namespace saker::run
