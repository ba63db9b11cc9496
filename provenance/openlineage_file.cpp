// write_event (openlineage.hpp): the site's event directory may be read by a collector
// and lie on a file system others use, so nothing here trusts a name in it: the directory
// is opened once without following a link, judged by its descriptor, and every file is
// made relative to that descriptor, exclusively, and published with link(), which never
// replaces what is there nor follows a link planted under the final name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "provenance/openlineage.hpp"

namespace saker::provenance::openlineage {
namespace {

constexpr int kMaxSameName = 100;  // ".2" ... ".100" before giving up on a name

std::string sys(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// "job-1.0.n1.START.json" → "job-1.0.n1.START.2.json" for attempt 2.
std::string nth_name(const std::string& name, int n) {
  if (n == 1) return name;
  const auto dot = name.rfind(".json");
  return name.substr(0, dot) + "." + std::to_string(n) + name.substr(dot);
}

// "" when the opened directory is ours and only we may write it.
std::string judge_dir(int dfd, const std::string& dir, struct stat& st) {
  if (::fstat(dfd, &st) != 0) return sys("cannot stat " + dir);
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
    return dir + " belongs to uid " + std::to_string(st.st_uid) + " or others may write it, so they could plant or remove "
           "events; make it uid " + std::to_string(::geteuid()) + "'s and not group- or world-writable (chown root " + dir +
           " && chmod 0750 " + dir + ")";
  return "";
}

}  // namespace

std::string write_event(const std::string& dir, const std::string& name, const std::string& json) {
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || name.size() < 6 ||
      name.substr(name.size() - 5) != ".json")
    return "OpenLineage event name '" + name + "' is not a plain NAME.json";
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST)
    return sys("cannot create " + dir) + "; create it (mode 0750, group of the site's collector) or fix openlineage-dir= "
                                         "in plugstack.conf";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return sys("cannot open " + dir + " as a directory") + " (a link is refused); make it a real directory";
  struct stat st {};
  if (std::string problem = judge_dir(dfd, dir, st); !problem.empty()) {
    ::close(dfd);
    return problem;
  }
  // pid and time: a temporary another (dead) process of the same pid left is never ours.
  timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::string tmp = "." + name + "." + std::to_string(::getpid()) + "." + std::to_string(now.tv_sec) +
                          std::to_string(now.tv_nsec) + ".tmp";
  const int fd = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string problem = sys("cannot create " + dir + "/" + tmp);
    ::close(dfd);
    return problem;
  }
  bool ok = write_all(fd, json + "\n");
  // The group is the directory's: the site gives its collector read access by that group.
  ok = ok && ::fchown(fd, ::geteuid(), st.st_gid) == 0 && ::fchmod(fd, 0640) == 0;
  std::string problem = ok ? "" : sys("cannot write " + dir + "/" + tmp);
  ::close(fd);
  for (int n = 1; ok; ++n) {
    if (::linkat(dfd, tmp.c_str(), dfd, nth_name(name, n).c_str(), 0) == 0) break;
    if (errno != EEXIST || n == kMaxSameName) {
      problem = sys("cannot publish " + dir + "/" + nth_name(name, n));
      break;
    }
  }
  ::unlinkat(dfd, tmp.c_str(), 0);
  ::close(dfd);
  return problem;
}

}  // namespace saker::provenance::openlineage
