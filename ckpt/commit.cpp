#include "ckpt/commit.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::ckpt::commit {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTempMarker = ".tmp.";

[[noreturn]] void io_error(const std::string& what, const fs::path& path, int err) {
  throw Error(explain(what + " " + path.string(), std::strerror(err),
                      "check free space, permissions and I/O errors (dmesg) on that filesystem"));
}

}  // namespace

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  // Dots would confuse the temp-name parser; short names are enough to tell hosts apart.
  std::string h = buf;
  for (char& c : h)
    if (c == '.') c = '_';
  return h;
}

fs::path temp_path_for(const fs::path& final_path) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%08llx", static_cast<unsigned long long>(rng() & 0xffffffffULL));
  const std::string name = "." + final_path.filename().string() + kTempMarker + hostname() + "." +
                           std::to_string(::getpid()) + "." + suffix;
  return final_path.parent_path() / name;
}

bool is_temp_name(const std::string& filename) {
  return !filename.empty() && filename[0] == '.' && filename.find(kTempMarker) != std::string::npos;
}

void create_private(const fs::path& path, unsigned mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) io_error("cannot create", path, errno);
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    io_error("cannot set the mode of", path, err);
  }
  ::close(fd);
}

void make_directories(const fs::path& dir, unsigned mode) {
  std::error_code ec;
  if (dir.empty() || fs::is_directory(dir, ec)) return;
  if (dir.has_parent_path() && dir.parent_path() != dir) make_directories(dir.parent_path(), mode);
  if (::mkdir(dir.c_str(), static_cast<mode_t>(mode)) != 0) {
    if (errno == EEXIST && fs::is_directory(dir, ec)) return;  // another rank made it first
    throw Error(explain("checkpoint directory " + dir.string() + " cannot be created", std::strerror(errno),
                        "check the path and permissions"));
  }
  // Against the umask: exactly the mode asked for (a racing rank's mkdir has the same one).
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || ::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    io_error("cannot set the mode of", dir, err);
  }
  ::close(fd);
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open for fsync", path, errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    // Some filesystems refuse fsync on directories; the rename is still atomic there.
    if (fs::is_directory(path) && (err == EINVAL || err == EBADF)) return;
    io_error("fsync failed for", path, err);
  }
  ::close(fd);
}

void publish(const fs::path& temp, const fs::path& final_path) {
  fsync_path(temp);
  if (::rename(temp.c_str(), final_path.c_str()) != 0) io_error("cannot rename " + temp.string() + " to", final_path, errno);
  fsync_path(final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path());
}

void write_latest(const fs::path& dir, const std::string& filename, unsigned mode) {
  const fs::path final_path = dir / kLatestName;
  const fs::path temp = temp_path_for(final_path);
  create_private(temp, mode);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) io_error("cannot open", temp, errno);
  const std::string text = filename + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(temp.c_str());
    io_error("cannot write", temp, n < 0 ? err : ENOSPC);
  }
  publish(temp, final_path);
}

std::optional<std::string> read_latest(const fs::path& dir) {
  std::FILE* f = std::fopen((dir / kLatestName).c_str(), "re");
  if (!f) return std::nullopt;
  char buf[512] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return std::nullopt;
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty() || s.find('/') != std::string::npos) return std::nullopt;
  return s;
}

std::vector<fs::path> remove_stale_temps(const fs::path& dir, std::chrono::seconds other_host_age) {
  std::vector<fs::path> removed;
  std::error_code ec;
  const std::string me = hostname();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_temp_name(name)) continue;
    // ".NAME.tmp.HOST.PID.RANDOM"
    const std::size_t marker = name.rfind(kTempMarker);
    const std::string rest = name.substr(marker + std::strlen(kTempMarker));
    const std::size_t dot1 = rest.find('.');
    const std::size_t dot2 = dot1 == std::string::npos ? dot1 : rest.find('.', dot1 + 1);
    if (dot2 == std::string::npos) continue;
    const std::string host = rest.substr(0, dot1);
    const long pid = std::strtol(rest.substr(dot1 + 1, dot2 - dot1 - 1).c_str(), nullptr, 10);
    bool stale = false;
    if (host == me) {
      stale = pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
    } else {
      auto mtime = fs::last_write_time(entry.path(), ec);
      if (!ec) stale = fs::file_time_type::clock::now() - mtime > other_host_age;
    }
    if (stale && fs::remove(entry.path(), ec)) {
      log::info("ckpt: removed stale temporary file " + entry.path().string() + " (its writer is gone)");
      removed.push_back(entry.path());
    }
  }
  return removed;
}

}  // namespace saker::ckpt::commit
