#include "provenance/openlineage_outputs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>

namespace saker::provenance::openlineage {
namespace {

constexpr std::size_t kMaxEntries = 100000;     // examined per listing: bounds the time a huge directory costs
constexpr std::size_t kMaxReport = 1 << 20;     // bytes read from the child

bool plain_name(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::none_of(s.begin(), s.end(), [](char c) { return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

struct Walk {
  uid_t owner = 0;
  std::int64_t since = 0;
  std::string dir;
  std::size_t examined = 0;
  Listing out;
};

// Lists the opened directory `dfd` (`rel`: its path under the root, "" for the root);
// takes ownership of dfd.
void walk(Walk& w, int dfd, const std::string& rel, bool descend) {
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    if (++w.examined > kMaxEntries) {
      w.out.note = "more than " + std::to_string(kMaxEntries) + " entries under " + w.dir + ": only the first were examined";
      break;
    }
    const std::string name = e->d_name;
    if (!plain_name(name)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode) && descend) {
      const int sub = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) walk(w, sub, name + "/", false);
    } else if (S_ISREG(st.st_mode) && is_checkpoint_name(name) && st.st_uid == w.owner &&
               st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec >= w.since) {
      if (w.out.outputs.size() == kMaxOutputs) {
        w.out.note = "more than " + std::to_string(kMaxOutputs) + " checkpoints: the rest are not listed";
        break;
      }
      w.out.outputs.push_back({w.dir + "/" + rel + name, static_cast<std::uint64_t>(st.st_size),
                               static_cast<std::int64_t>(st.st_mtime), ""});
    }
  }
  ::closedir(d);
}

bool write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The child's side: drop to the job's user, list, report, hash, report, exit. Never returns.
[[noreturn]] void child_list(int out, const std::string& dir, uid_t uid, gid_t gid, const std::function<Listing()>& list,
                             const HashStep& hash) {
  if (::geteuid() == 0 && (::setgroups(1, &gid) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0))
    ::_exit(2);
  if (::geteuid() != uid) ::_exit(2);
  try {
    Listing l = list();
    // The listing first: a read that hangs below must not cost slurmstepd the list.
    if (!write_all(out, encode_listing(l, dir))) ::_exit(3);
    if (hash) {
      const std::string note = hash(l);
      if (!write_all(out, encode_digests(l, dir, note))) ::_exit(3);
    }
    ::_exit(0);
  } catch (...) {
    ::_exit(3);
  }
}

bool has_line(const std::string& text, const std::string& line) {
  return text.rfind(line + "\n", 0) == 0 || text.find("\n" + line + "\n") != std::string::npos;
}

std::string base_of(const std::string& dir) { return dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir; }

std::string join_notes(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + "; " + b; }

bool is_hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Reads until EOF, the deadline or kMaxReport bytes. true on EOF.
bool read_report(int fd, int timeout_ms, std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (text.size() < kMaxReport) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got == 0;
    text.append(buf, static_cast<std::size_t>(got));
  }
  return false;
}

}  // namespace

bool is_checkpoint_name(std::string_view name) {
  if (name.size() != 20 || name.substr(0, 5) != "ckpt-" || name.substr(17) != ".h5") return false;
  return std::all_of(name.begin() + 5, name.begin() + 17, [](char c) { return c >= '0' && c <= '9'; });
}

std::int64_t step_start_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

Listing list_checkpoints(const std::string& dir, uid_t owner, std::int64_t since_ns) {
  if (dir.empty() || dir[0] != '/') return {{}, "the checkpoint directory '" + dir + "' is not an absolute path: outputs unknown"};
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (dfd < 0) return {{}, "cannot list the checkpoint directory " + dir + ": " + std::strerror(errno)};
  Walk w;
  w.owner = owner;
  w.since = since_ns;
  w.dir = dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir;
  walk(w, dfd, "", true);
  std::sort(w.out.outputs.begin(), w.out.outputs.end(), [](const Output& a, const Output& b) { return a.path < b.path; });
  return w.out;
}

Listing list_checkpoints_as(const std::string& dir, uid_t uid, gid_t gid, std::int64_t since_ns, int timeout_ms,
                            const HashLimits& hash) {
  HashStep hasher;
  if (hash.bytes > 0 && hash.ms > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(hash.ms);  // from this call
    hasher = [&dir, uid, hash, deadline](Listing& l) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      return hash_outputs(l.outputs, dir, uid, {hash.bytes, static_cast<int>(std::max<long long>(0, left.count()))});
    };
  }
  return list_in_child(dir, uid, gid, timeout_ms, [&] { return list_checkpoints(dir, uid, since_ns); }, hasher);
}

Listing list_in_child(const std::string& dir, uid_t uid, gid_t gid, int timeout_ms, const std::function<Listing()>& list,
                      const HashStep& hash) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {{}, std::string("cannot list the checkpoints: pipe: ") + std::strerror(errno)};
  const pid_t child = ::fork();
  if (child == 0) {
    // Twice: the lister is re-parented at once, so slurmstepd never reaps (or waits for) it.
    if (::fork() != 0) ::_exit(0);
    // Holds nothing of slurmstepd's (its sockets, the tasks' I/O): a lister hung on a
    // file system must not keep them open.
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && devnull >= 0; ++fd) ::dup2(devnull, fd);
    if (::dup2(p[1], 3) != 3 || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0) ::_exit(2);  // not the hasher's
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    ::signal(SIGCHLD, SIG_DFL);  // the hasher it spawns is reaped by waitpid, not by a handler of slurmstepd's
    child_list(3, dir, uid, gid, list, hash);
  }
  ::close(p[1]);
  if (child < 0) {
    ::close(p[0]);
    return {{}, std::string("cannot list the checkpoints: fork: ") + std::strerror(errno)};
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  std::string text;
  const bool whole = read_report(p[0], timeout_ms, text);
  ::close(p[0]);  // a lister still running gets SIGPIPE when it reports
  if (!whole && !has_line(text, "end"))
    return {{}, "the listing of " + dir + " did not finish within " + std::to_string(timeout_ms) +
                    " ms (a hung or slow file system?): outputs unknown"};
  if (text.empty()) return {{}, "the listing of " + dir + " as uid " + std::to_string(uid) + " failed: outputs unknown"};
  Listing l = decode_listing(text, dir);
  if (!whole)
    l.note = join_notes(l.note, "reading the checkpoints for their SHA-256 did not finish within " +
                                    std::to_string(timeout_ms) + " ms (a hung or slow file system?)");
  return l;
}

std::string encode_listing(const Listing& l, const std::string& dir) {
  std::string note = l.note;
  std::replace(note.begin(), note.end(), '\n', ' ');
  std::string out = note + "\n";
  const std::string prefix = base_of(dir) + "/";
  for (const Output& o : l.outputs)
    if (o.path.rfind(prefix, 0) == 0)
      out += std::to_string(o.size) + "\t" + std::to_string(o.mtime_unix) + "\t" + o.path.substr(prefix.size()) + "\n";
  return out + "end\n";
}

std::string encode_digests(const Listing& l, const std::string& dir, const std::string& note) {
  std::string out;
  const std::string prefix = base_of(dir) + "/";
  for (const Output& o : l.outputs)
    if (!o.sha256.empty() && o.path.rfind(prefix, 0) == 0) out += "sha256\t" + o.sha256 + "\t" + o.path.substr(prefix.size()) + "\n";
  std::string n = note;
  std::replace(n.begin(), n.end(), '\n', ' ');
  return out + "hashed\t" + n + "\n";
}

namespace {

// A relative path the child may name: a checkpoint in DIR or in one of its direct subdirectories.
bool report_path_ok(const std::string& rel) {
  const std::size_t slash = rel.find('/');
  return is_checkpoint_name(rel.substr(slash == std::string::npos ? 0 : slash + 1)) &&
         (slash == std::string::npos || plain_name(rel.substr(0, slash)));
}

// "SIZE\tMTIME\tREL" as an output under `base`; nullopt when malformed or outside.
std::optional<Output> listing_line(const std::string& line, const std::string& base) {
  const std::size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
  if (t2 == std::string::npos || !report_path_ok(line.substr(t2 + 1))) return std::nullopt;
  Output o{base + "/" + line.substr(t2 + 1), 0, 0, ""};
  try {
    o.size = std::stoull(line.substr(0, t1));
    o.mtime_unix = std::stoll(line.substr(t1 + 1, t2 - t1 - 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return o;
}

// "sha256\tHEX\tREL": the digest given to the listed output it names (nothing else).
void digest_line(const std::string& line, const std::string& base, Listing& l) {
  if (line.size() < 72 || line.compare(0, 7, "sha256\t") != 0 || line[71] != '\t' || !is_hex64(line.substr(7, 64))) return;
  const std::string path = base + "/" + line.substr(72);
  for (Output& o : l.outputs)
    if (o.path == path) o.sha256 = line.substr(7, 64);
}

}  // namespace

Listing decode_listing(const std::string& text, const std::string& dir) {
  Listing l;
  const std::string base = base_of(dir);
  std::size_t pos = text.find('\n');
  if (pos == std::string::npos) return {{}, "the checkpoint listing was cut short: outputs unknown"};
  l.note = text.substr(0, pos);
  bool listed = false;  // "end" seen
  for (++pos; pos < text.size();) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!listed && line == "end") {
      listed = true;
    } else if (!listed) {
      if (auto o = listing_line(line, base); o && l.outputs.size() < kMaxOutputs) l.outputs.push_back(*o);
    } else if (line.compare(0, 7, "hashed\t") == 0) {
      l.note = join_notes(l.note, line.substr(7));
      return l;
    } else {
      digest_line(line, base, l);
    }
  }
  if (!listed) l.note = join_notes(l.note, "the checkpoint listing was cut short: some outputs may be missing");
  else if (pos < text.size() || std::any_of(l.outputs.begin(), l.outputs.end(), [](const Output& o) { return !o.sha256.empty(); }))
    l.note = join_notes(l.note, "the report of the checkpoints' SHA-256 was cut short: some have none");
  return l;
}

}  // namespace saker::provenance::openlineage
