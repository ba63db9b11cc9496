#include "plugins/spank/launch_audit.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "policies/audit_head.hpp"

namespace saker::spank {

std::string launch_audit_path(const std::string& dir, const std::string& node) {
  return dir + "/" + node + "/launch-audit.log";
}

std::string append_launch_record(const std::string& path, const policy::audit::Entry& entry) {
  const std::string node_dir = path.substr(0, path.rfind('/'));
  const std::string dir = node_dir.substr(0, node_dir.rfind('/'));
  for (const std::string& d : {dir, node_dir})
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return "cannot create " + d + ": " + std::strerror(errno);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
  std::string problem;
  if (::flock(fd, LOCK_EX) != 0) {
    problem = "cannot lock " + path + ": " + std::strerror(errno);
  } else {
    try {
      policy::audit::Chain chain = policy::audit::Chain::resume(path);
      const std::string line = chain.seal(policy::audit::fields_json(entry));
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fdatasync(fd) != 0) {
        problem = "cannot append to " + path + ": " + std::strerror(errno);
      } else {
        // The sealed head (count, last hash, length) is written under the same lock, so
        // a deleted tail of this log is detected like the controller's.
        struct stat st {};
        const auto bytes = ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
        problem = policy::audit::write_head(path, policy::audit::Head{chain.last_id(), chain.last_hash(), bytes}, "");
      }
    } catch (const std::exception& e) {
      problem = path + ": " + e.what();
    }
  }
  ::close(fd);  // releases the lock
  return problem;
}

}  // namespace saker::spank
