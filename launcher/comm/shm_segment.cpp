// Making, opening and checking ShmGroup's segment in /dev/shm (shm.hpp says why each
// check is there), and sharing its name among the members.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_names.hpp"
#include "launcher/comm/shm.hpp"

namespace saker::comm {
namespace {

std::string octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// What fstat says about a segment that is not the private one we expect, or "".
std::string mismatch(const struct stat& st, std::size_t bytes) {
  const unsigned mode = static_cast<unsigned>(st.st_mode) & 07777;
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_uid != geteuid() || mode != 0600)
    return "it is owned by uid " + std::to_string(st.st_uid) + " with mode " + octal(mode) + ", not by this user (uid " +
           std::to_string(geteuid()) + ") with mode 0600: another user may have planted it";
  if (static_cast<std::size_t>(st.st_size) != bytes)
    return "it holds " + std::to_string(st.st_size) + " bytes, not " + std::to_string(bytes) +
           " (do the ranks set different SAKER_COMM_SHM_STRIPES?)";
  return "";
}

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw Error(explain("refusing the shared-memory segment /dev/shm" + name, why,
                      "remove it (rm /dev/shm" + name + ") and report it to the administrator if you did not make it; "
                      "SAKER_COMM_TRANSPORT=ring runs without shared memory"));
}

}  // namespace

namespace segment {

int create(const std::string& name, std::size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST || err == ELOOP) refuse(name, "a file of that name exists already, and a new segment never adopts one");
    throw Error(explain("cannot create the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "check free space in /dev/shm, or set SAKER_COMM_TRANSPORT=ring"));
  }
  // The umask may have narrowed the mode; the members check for exactly 0600.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw Error(explain("cannot size the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "check free space in /dev/shm, or set SAKER_COMM_TRANSPORT=ring"));
  }
  return fd;
}

int open_checked(const std::string& name, std::size_t bytes, bool missing_ok) {
  int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT && missing_ok) return -1;
    if (err == ELOOP) refuse(name, "it is a symbolic link");
    throw Error(explain("cannot open the shared-memory segment /dev/shm" + name, std::strerror(err),
                        "the rank that made it may have failed: look at its output; or set SAKER_COMM_TRANSPORT=ring"));
  }
  struct stat st {};
  std::string why = fstat(fd, &st) != 0 ? std::string("fstat failed: ") + std::strerror(errno) : mismatch(st, bytes);
  // Our own, still empty: the creator has not sized it yet (create() sets the mode first).
  if (!why.empty() && missing_ok && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size == 0) {
    close(fd);
    return -1;
  }
  if (!why.empty()) {
    close(fd);
    refuse(name, why);
  }
  return fd;
}

void remove_if_ours(const std::string& name) noexcept {
  int fd = shm_open(name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return;
  struct stat st {};
  const bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
  close(fd);
  if (ours) shm_unlink(name.c_str());
}

void abandon(int fd, char*& base, std::size_t bytes, const std::string& name) noexcept {
  if (fd >= 0) close(fd);
  if (base) munmap(base, bytes);
  base = nullptr;
  if (!name.empty()) remove_if_ours(name);
}

}  // namespace segment

void ShmGroup::map_segment(int channel) {
  int fd = -1;
  try {
    fd = share_name(channel);
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    fd = -1;
    if (p == MAP_FAILED)
      throw Error(explain("cannot map /dev/shm" + name_, std::strerror(err), "set SAKER_COMM_TRANSPORT=ring"));
    base_ = static_cast<char*>(p);
    barrier(0, "mapping the shared-memory segment");  // every member has it mapped now
  } catch (...) {
    segment::abandon(fd, base_, map_bytes_, name_);  // a failed start leaves no name behind either
    throw;
  }
  // The mappings stay; the name goes, so that nothing is left in /dev/shm whatever happens.
  // Every member removes it: the creator may be killed right after the barrier.
  shm_unlink(name_.c_str());
}

// The name travels as a fixed-size, NUL-padded record over the (authenticated) mesh links,
// before the segment exists: then every member can remove it should the creator die at
// any moment after creating it. The links are opened (and authenticated) first, so that
// nothing slow runs while only the creator knows the name.
int ShmGroup::share_name(int channel) {
  constexpr std::size_t kRecord = 64;
  const int link_channel = kNameChannel + channel;
  auto deadline = net::deadline_in(mesh_.timeout());
  if (index_ == 0) {
    std::vector<int> links;
    for (std::size_t j = 1; j < members_.size(); ++j) links.push_back(mesh_.link(members_[j], link_channel));
    if (int swept = shm_names::sweep_stale(); swept > 0)
      log::info("comm: removed " + std::to_string(swept) + " shared-memory segment(s) that killed ranks left in /dev/shm");
    name_ = shm_names::fresh();
    char record[kRecord] = {};
    std::memcpy(record, name_.data(), std::min(name_.size(), kRecord - 1));
    for (std::size_t j = 1; j < members_.size(); ++j)
      net::send_all(links[j - 1], record, kRecord, deadline, mesh_.who(members_[j]));
    return segment::create(name_, map_bytes_);
  }
  const int creator = members_[0];
  char record[kRecord] = {};
  net::recv_all(mesh_.link(creator, link_channel), record, kRecord, deadline, mesh_.who(creator));
  std::string name(record, strnlen(record, kRecord));
  if (!shm_names::well_formed(name))
    throw Error(explain("refusing the shared-memory segment name that " + mesh_.who(creator) + " sent",
                        "it is not of the form /saker-PID-HEX", "use the same Saker version on every rank"));
  name_ = name;
  // The creator makes it right after sending the name: wait for it, watching the creator.
  for (int tries = 1;; ++tries) {
    if (int fd = segment::open_checked(name_, map_bytes_, /*missing_ok=*/true); fd >= 0) return fd;
    if (tries % 64 == 0) {
      mesh_.check_abort("mapping the shared-memory segment");
      int pid = mesh_.peer(creator).pid;
      if (pid > 0 && pid != getpid() && shm_names::process_gone(pid))
        mesh_.fail("mapping the shared-memory segment", creator, mesh_.who(creator) + " exited (process " +
                                                                     std::to_string(pid) + " is gone)");
      if (net::Clock::now() >= deadline)
        mesh_.fail("mapping the shared-memory segment", creator,
                   mesh_.who(creator) + " did not create /dev/shm" + name_ + " within " +
                       std::to_string(mesh_.timeout().count()) + " ms");
    }
    sched_yield();
  }
}

}  // namespace saker::comm
