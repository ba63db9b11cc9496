// The checkpoint directory pinned by a descriptor for one save (pinned_dir.hpp).
#include "ckpt/pinned_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "common/error.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

namespace {

fs::path fd_target(const fs::path& via) {
  char buf[PATH_MAX + 1];
  const ssize_t n = ::readlink(via.c_str(), buf, PATH_MAX);
  if (n <= 0 || buf[0] != '/') return {};
  return fs::path(std::string(buf, static_cast<std::size_t>(n)));
}

}  // namespace

PinnedDir::~PinnedDir() {
  if (fd >= 0) ::close(fd);
}

std::shared_ptr<PinnedDir> pin_directory(const fs::path& dir) {
  auto p = std::make_shared<PinnedDir>();
  p->fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (p->fd < 0)
    throw Error(explain("cannot open checkpoint directory " + dir.string(), std::strerror(errno),
                        "check the path and permissions"));
  p->via = "/proc/self/fd/" + std::to_string(p->fd);
  p->real = fd_target(p->via);
  struct stat by_fd{}, by_via{};
  if (p->real.empty() || ::fstat(p->fd, &by_fd) != 0 || ::stat(p->via.c_str(), &by_via) != 0 ||
      by_fd.st_dev != by_via.st_dev || by_fd.st_ino != by_via.st_ino)
    throw Error(explain("cannot tell where checkpoint directory " + dir.string() + " leads",
                        "/proc/self/fd does not name the opened directory", "mount /proc (saves need it)"));
  return p;
}

void confirm_pinned(const PinnedDir& p, const fs::path& dir) {
  struct stat by_fd{}, by_name{};
  if (::fstat(p.fd, &by_fd) != 0 || ::stat(p.real.c_str(), &by_name) != 0 || by_fd.st_dev != by_name.st_dev ||
      by_fd.st_ino != by_name.st_ino || fd_target(p.via) != p.real)
    throw DestinationRefused(explain("saker-ckpt: refusing to save to " + dir.string(),
                                     "the directory moved while its residency was being checked (" + p.real.string() +
                                         " no longer leads to it)",
                                     "keep the checkpoint directory and its parents writable by the job's owner only"));
}

std::shared_ptr<PinnedDir> pin_and_check(const fs::path& dir, const Options& options, const State& state, bool encrypted) {
  auto pinned = pin_directory(dir);
  if (options.guard) {
    try {
      ckpt::check_destination(*options.guard, pinned->real, state.lineage, encrypted, state.step);
    } catch (const DestinationRefused& e) {
      // Name the directory the user gave, and where it led when judged.
      std::string what = e.what();
      const std::string judged = " to " + pinned->real.string();
      const auto at = what.find(judged);
      if (at != std::string::npos && pinned->real != dir)
        what.replace(at, judged.size(), " to " + dir.string() + " (which leads to " + pinned->real.string() + ")");
      throw DestinationRefused(what);
    }
    confirm_pinned(*pinned, dir);
  }
  return pinned;
}


}  // namespace saker::ckpt
