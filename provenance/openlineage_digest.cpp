// The SHA-256 of the checkpoints a step wrote, for its OpenLineage end event
// (openlineage_outputs.hpp, hash_outputs). Runs in the listing's child, as the job's user.
//
// Why sha256sum and not common/sha256.hpp: that portable code reads 41-44 MB/s on this
// machine under load, sha256sum about 500 MB/s; within the step end's deadline the first
// hashes a few tens of megabytes, the second a checkpoint of a useful size. And why not
// libcrypto here: the child is a fork of multi-threaded slurmstepd, where loading a
// library could wait forever on a lock another thread held at the fork; an exec'ed
// program starts clean. It gets the file we opened and checked as its standard input,
// never a path, so what it reads is what we judged.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "provenance/openlineage_outputs.hpp"

namespace saker::provenance::openlineage {
namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Opens DIR/REL (REL: "NAME" or "SUB/NAME") without following a link at any level below DIR.
int open_below(int dirfd, const std::string& rel) {
  const std::size_t slash = rel.find('/');
  if (slash == std::string::npos)
    return ::openat(dirfd, rel.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  const Fd sub(::openat(dirfd, rel.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (sub.fd < 0) return -1;
  return ::openat(sub.fd, rel.substr(slash + 1).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

// Still the file that was listed: a regular file of the owner, of its size and time.
bool same_as_listed(int fd, const Output& o, uid_t owner, struct stat& st) {
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner &&
         static_cast<std::uint64_t>(st.st_size) == o.size && st.st_mtime == o.mtime_unix;
}

std::int64_t left_ms(Clock::time_point deadline) {
  return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

// `program` reading `fd` on its standard input, killed at `deadline`. The 64 hex digits, or
// nullopt with `why` set.
std::optional<std::string> run_hasher(const char* program, int fd, Clock::time_point deadline, std::string& why) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return why = std::string("pipe: ") + std::strerror(errno), std::nullopt;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  char* const argv[] = {const_cast<char*>(program), const_cast<char*>("-"), nullptr};
  char* const envp[] = {const_cast<char*>("LC_ALL=C"), nullptr};
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, program, &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (err != 0) {
    ::close(out[0]);
    return why = std::string("cannot run ") + program + ": " + std::strerror(err) + " (fix: install coreutils)", std::nullopt;
  }
  std::string text;
  char buf[256];
  bool late = false;
  for (;;) {
    pollfd p{out[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left_ms(deadline)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      late = true;
      break;
    }
    const ssize_t got = ::read(out[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || (text.append(buf, static_cast<std::size_t>(got)), text.size() > 4096)) break;
  }
  ::close(out[0]);
  if (late) {
    // Not waited for: it may be stuck in a read of a hung file system, where even SIGKILL
    // waits. When this lister exits, init inherits and reaps it.
    ::kill(pid, SIGKILL);
    return why = "deadline", std::nullopt;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string hex = text.substr(0, 64);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.size() < 64 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    return why = std::string(program) + " failed", std::nullopt;
  return hex;
}

struct Tally {
  std::size_t over_budget = 0, late = 0, changed = 0;
  std::string failure;  // the first other reason
};

// Hashes one output; returns false once the deadline has passed (no later file is tried).
bool hash_one(int dirfd, const std::string& rel, Output& o, uid_t owner, Clock::time_point deadline, const char* program,
              Tally& t) {
  const Fd fd(open_below(dirfd, rel));
  struct stat before {}, after {};
  if (fd.fd < 0 || !same_as_listed(fd.fd, o, owner, before)) return ++t.changed, true;
  std::string why;
  const auto hex = run_hasher(program, fd.fd, deadline, why);
  if (!hex) {
    if (why == "deadline") return ++t.late, false;
    if (t.failure.empty()) t.failure = why;
    return ++t.changed, true;
  }
  if (!same_as_listed(fd.fd, o, owner, after) || after.st_mtim.tv_nsec != before.st_mtim.tv_nsec) return ++t.changed, true;
  o.sha256 = *hex;
  return true;
}

std::string tally_note(const Tally& t, const HashLimits& limits, std::size_t unread) {
  if (unread == 0) return "";
  std::string why;
  auto add = [&why](std::size_t n, const std::string& what) {
    if (n > 0) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  const std::string budget = limits.bytes >= (1u << 20) ? std::to_string(limits.bytes >> 20) + " MiB" : std::to_string(limits.bytes) + " bytes";
  add(t.over_budget, "over the " + budget + " a step's end may read");
  add(t.late, "not read within " + std::to_string(limits.ms) + " ms");
  add(t.changed, "changed, replaced or unreadable since listed" + (t.failure.empty() ? "" : " (" + t.failure + ")"));
  return "no SHA-256 for " + std::to_string(unread) + " checkpoint(s): " + why + " (saker-ckpt provenance FILE states it)";
}

}  // namespace

std::string hash_outputs(std::vector<Output>& outputs, const std::string& dir, uid_t owner, const HashLimits& limits,
                         const char* program) {
  if (outputs.empty()) return "";
  const auto deadline = Clock::now() + std::chrono::milliseconds(limits.ms);
  const std::string prefix = (dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir) + "/";
  const Fd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  Tally t;
  if (dirfd.fd < 0) t.failure = "cannot open " + dir + ": " + std::strerror(errno);
  // Newest first: when the budget runs out, the step's last checkpoint is the one hashed.
  std::vector<Output*> order;
  for (Output& o : outputs) order.push_back(&o);
  std::stable_sort(order.begin(), order.end(), [](const Output* a, const Output* b) {
    return a->mtime_unix != b->mtime_unix ? a->mtime_unix > b->mtime_unix : a->path > b->path;
  });
  std::uint64_t budget = limits.bytes;
  bool in_time = true;
  for (Output* o : order) {
    if (dirfd.fd < 0) {
      ++t.changed;
      continue;
    }
    if (!in_time || left_ms(deadline) == 0) {
      ++t.late;
      continue;
    }
    if (o->path.rfind(prefix, 0) != 0) {
      ++t.changed;
      continue;
    }
    if (o->size > budget) {
      ++t.over_budget;
      continue;
    }
    budget -= o->size;
    in_time = hash_one(dirfd.fd, o->path.substr(prefix.size()), *o, owner, deadline, program, t);
  }
  return tally_note(t, limits, t.over_budget + t.late + t.changed);
}

}  // namespace saker::provenance::openlineage
