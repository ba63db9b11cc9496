#include "launcher/run/runtime_dir.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/random.hpp"

namespace saker::run {
namespace {

std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[1024];
  const bool known = ::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr;
  return "uid " + std::to_string(uid) + (known ? std::string(" (") + pw.pw_name + ")" : "");
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string found_text(const struct stat& st) {
  const char* kind = S_ISLNK(st.st_mode) ? "a symlink" : S_ISDIR(st.st_mode) ? "a directory" : "a file";
  return std::string(kind) + " owned by " + user_name(st.st_uid) + " with mode " + mode_text(st.st_mode);
}

Error refuse(const std::string& path, const struct stat& st, const std::string& why, const std::string& fix) {
  return Error(explain("refusing " + path + ": it is " + found_text(st), why, fix));
}

bool writable_by_others(mode_t mode) { return (mode & (S_IWGRP | S_IWOTH)) != 0; }

}  // namespace

void check_parent_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw Error(explain("cannot use " + dir + " for saker-run's runtime files", std::strerror(errno),
                        "create it, or pass --ckpt-dir / set TMPDIR to a directory of yours"));
  }
  const std::string fix = "use a directory of yours that only you can write (chmod go-w), or set TMPDIR / --ckpt-dir";
  if (!S_ISDIR(st.st_mode)) throw refuse(dir, st, "saker-run's runtime files need a directory", fix);
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    throw refuse(dir, st, "another user owns it and could replace what saker-run creates there", fix);
  }
  if (writable_by_others(st.st_mode) && (st.st_mode & S_ISVTX) == 0) {
    throw refuse(dir, st, "others may write it and it is not sticky (as /tmp is), so they could rename what "
                          "saker-run creates there", fix + ", or chmod +t it");
  }
}

void check_private_dir(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    throw Error(explain("saker-run's runtime directory " + path + " is gone", std::strerror(errno),
                        "do not remove it while the job runs"));
  }
  const std::string fix = "remove it (it is not saker-run's) and run again";
  if (!S_ISDIR(st.st_mode)) throw refuse(path, st, "saker-run expected its own directory", fix);
  if (st.st_uid != ::geteuid()) throw refuse(path, st, "another user made it", fix);
  if ((st.st_mode & 077) != 0) throw refuse(path, st, "others may read or write in it", fix);
}

void make_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0) {
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::lstat(path.c_str(), &st) == 0) {
      throw refuse(path, st, "saker-run creates its runtime directory itself and never adopts one that exists",
                   "remove it (if another user made it, ask an administrator) and run again");
    }
    throw Error(explain("cannot create saker-run's runtime directory " + path, std::strerror(err),
                        "pass --ckpt-dir on a writable file system, or set TMPDIR"));
  }
  check_private_dir(path);
}

void create_dir_private(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(explain("cannot create the directory " + path, std::strerror(errno),
                        "create it yourself, or pass a --ckpt-dir you can write"));
  }
}

bool is_own_regular_file(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
}

RunDir::RunDir(const std::string& base, const std::string& job, int attempt) {
  check_parent_dir(base);
  const std::string suffix = saker::random::job_key_hex().substr(0, 16);
  if (suffix.empty()) {
    throw Error(explain("cannot name saker-run's runtime directory", "the kernel gave no random bytes",
                        "this is a system problem; check getrandom(2)"));
  }
  path_ = base + "/.saker-run-" + job + "-" + std::to_string(::getpid()) + "-" + std::to_string(attempt) + "-" + suffix;
  make_private_dir(path_);
}

RunDir::~RunDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // remove_all removes a symlink, never what it points to
}

bool RunDir::preempt_marker_set() const {
  const std::string marker = preempt_marker();
  struct stat st {};
  if (::lstat(marker.c_str(), &st) != 0) return false;
  try {
    check_private_dir(path_);
  } catch (const Error& e) {
    log::error(std::string("saker-run: ignoring the preempt marker: ") + e.what());
    return false;
  }
  if (!is_own_regular_file(marker)) {
    log::error("saker-run: ignoring the preempt marker " + marker + ": it is " + found_text(st) +
               ", not a file of this user; the attempt is judged by the ranks' exit codes");
    return false;
  }
  return true;
}

std::string RunDir::checkpoint_note_dir() const {
  const std::string note = checkpoint_note();
  struct stat st {};
  if (::lstat(note.c_str(), &st) != 0) return "";
  try {
    check_private_dir(path_);
  } catch (const Error& e) {
    log::error(std::string("saker-run: ignoring the checkpoint note: ") + e.what());
    return "";
  }
  if (!is_own_regular_file(note)) {
    log::error("saker-run: ignoring the checkpoint note " + note + ": it is " + found_text(st) + ", not a file of this user");
    return "";
  }
  std::ifstream in(note);
  std::string line;
  std::getline(in, line);
  if (line.size() > 4096) line.resize(4096);
  return line;
}

void RunDir::write_resize_notice(int world_size) const {
  const std::string final_path = resize_notice(), tmp = final_path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw Error(explain("cannot write the resize notice " + tmp, std::strerror(errno),
                        "check that the run directory " + path_ + " is still this user's"));
  }
  const std::string text = std::to_string(world_size) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(explain("cannot write the resize notice " + final_path, why, "check the file system of " + path_));
  }
}

}  // namespace saker::run
