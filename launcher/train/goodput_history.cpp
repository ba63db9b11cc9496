#include "launcher/train/goodput_history.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "common/error.hpp"
#include "common/file.hpp"

namespace saker::train {
namespace {

constexpr const char* kHeader = "saker-train failure history 1";
// A history of kMaxAttempts lines is under 100 KiB; anything far larger is not ours.
constexpr off_t kMaxBytes = 1 << 20;

const char* end_name(FailureHistory::End e) {
  switch (e) {
    case FailureHistory::End::running: return "running";
    case FailureHistory::End::done: return "done";
    case FailureHistory::End::stopped: return "stopped";
  }
  return "running";
}

// "key=value" from a line's words; throws naming the line when absent or not a finite,
// non-negative number.
double number_field(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    if (word.rfind(key + "=", 0) != 0) continue;
    const std::string value = word.substr(key.size() + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0) break;
    return v;
  }
  throw Error("line '" + line + "' has no valid " + key + "=NUMBER");
}

std::string text_field(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  std::string word;
  while (words >> word)
    if (word.rfind(key + "=", 0) == 0) return word.substr(key.size() + 1);
  throw Error("line '" + line + "' has no " + key + "=");
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", s);
  return buf;
}

std::string temp_path(const std::string& path) {
  // libsaker_ckpt's temporary-name convention (".NAME.tmp.HOST.PID.RANDOM"): its sweep of
  // the checkpoint directory removes the file if this process dies between write and rename.
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  for (char* c = host; *c != '\0'; ++c)
    if (*c == '.') *c = '-';
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + "." + name + ".tmp." + host + "." + std::to_string(::getpid()) + "." +
         std::to_string(std::random_device{}() & 0xffffff);
}

}  // namespace

std::string FailureHistory::load() {
  attempts_.clear();
  carried_interruptions_ = carried_attempts_ = 0;
  carried_seconds_ = 0;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return "";
  const std::string ignored = "failure history " + path_ + " ignored (a fresh one replaces it): ";
  if (fd < 0) return ignored + (errno == ELOOP ? "it is a symbolic link" : std::strerror(errno));
  struct stat st {};
  const bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_size <= kMaxBytes;
  std::string bytes;
  if (ours) {
    char chunk[16384];
    ssize_t n;
    while ((n = ::read(fd, chunk, sizeof chunk)) > 0 && static_cast<off_t>(bytes.size()) <= kMaxBytes)
      bytes.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (!ours) return ignored + "it is not a regular file of this user, or larger than 1 MiB";
  try {
    parse(bytes);
  } catch (const Error& e) {
    attempts_.clear();
    carried_interruptions_ = carried_attempts_ = 0;
    carried_seconds_ = 0;
    return ignored + e.what();
  }
  return "";
}

void FailureHistory::parse(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) throw Error("the first line is not '" + std::string(kHeader) + "'");
  std::vector<Attempt> attempts;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("carried ", 0) == 0) {
      carried_attempts_ = static_cast<long>(number_field(line, "attempts"));
      carried_interruptions_ = static_cast<long>(number_field(line, "interruptions"));
      carried_seconds_ = number_field(line, "seconds");
    } else if (line.rfind("attempt ", 0) == 0) {
      Attempt a{number_field(line, "start"), number_field(line, "alive"), End::running};
      const std::string end = text_field(line, "end");
      if (end == "done") a.end = End::done;
      else if (end == "stopped") a.end = End::stopped;
      else if (end != "running") throw Error("line '" + line + "' has end=" + end + " (running, done or stopped)");
      attempts.push_back(a);
    } else {
      throw Error("line '" + line + "' is neither 'attempt ...' nor 'carried ...'");
    }
  }
  attempts_ = std::move(attempts);
}

std::string FailureHistory::text() const {
  std::string out = std::string(kHeader) + "\n";
  char buf[160];
  if (carried_attempts_ > 0) {
    std::snprintf(buf, sizeof buf, "carried attempts=%ld interruptions=%ld seconds=%.3f\n", carried_attempts_,
                  carried_interruptions_, carried_seconds_);
    out += buf;
  }
  for (const Attempt& a : attempts_) {
    std::snprintf(buf, sizeof buf, "attempt start=%.3f alive=%.3f end=%s\n", a.start, a.alive, end_name(a.end));
    out += buf;
  }
  return out;
}

void FailureHistory::begin(double now, bool restarted) {
  if (restarted && (attempts_.empty() || attempts_.back().end == End::done)) {
    attempts_.push_back(Attempt{now, now, End::running});  // died before it wrote its line
  }
  attempts_.push_back(Attempt{now, now, End::running});
  begun_ = true;
  while (attempts_.size() > kMaxAttempts) {
    const Attempt& old = attempts_.front();
    ++carried_attempts_;
    carried_interruptions_ += old.end == End::done ? 0 : 1;
    carried_seconds_ += std::max(0.0, old.alive - old.start);
    attempts_.erase(attempts_.begin());
  }
}

void FailureHistory::alive(double now) {
  if (begun_) attempts_.back().alive = std::max(attempts_.back().alive, now);
}

void FailureHistory::end(double now, bool stopped) {
  if (!begun_) return;
  alive(now);
  attempts_.back().end = stopped ? End::stopped : End::done;
}

void FailureHistory::write() const {
  const std::string temp = temp_path(path_);
  std::string why;
  const int fd = file::open_private(temp, O_TRUNC, 0600, &why);
  if (fd < 0) {
    throw Error(explain("cannot write the failure history " + path_ + " (through " + temp + ")", why,
                        "check the checkpoint directory's permissions and free space"));
  }
  const std::string bytes = text();
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path_.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(temp.c_str());
    throw Error(explain("cannot write the failure history " + path_, std::strerror(e),
                        "check the checkpoint directory's permissions and free space"));
  }
}

int FailureHistory::interruptions() const {
  long n = carried_interruptions_;
  const std::size_t before = begun_ ? attempts_.size() - 1 : attempts_.size();
  for (std::size_t i = 0; i < before; ++i) n += attempts_[i].end == End::done ? 0 : 1;
  return static_cast<int>(n);
}

double FailureHistory::running_seconds(double now) const {
  double total = carried_seconds_;
  for (std::size_t i = 0; i < attempts_.size(); ++i) {
    const bool current = begun_ && i + 1 == attempts_.size();
    total += std::max(0.0, (current ? std::max(now, attempts_[i].alive) : attempts_[i].alive) - attempts_[i].start);
  }
  return total;
}

MtbfEstimate FailureHistory::estimate(double now) const {
  const int k = interruptions();
  const double ran = running_seconds(now);
  if (k == 0) {
    if (ran > kPriorMtbfSeconds)
      return {ran, "this job's history (no interruption in " + seconds_text(ran) + " s of running)"};
    return {kPriorMtbfSeconds, "the prior of one interruption an hour (none yet in this job's " + seconds_text(ran) +
                                   " s of running)"};
  }
  // At least a second: an attempt that died before its first checkpoint adds no running
  // time, and M near 0 would ask for a checkpoint every step for no measured reason.
  return {std::max(1.0, ran / k), "this job's history (" + std::to_string(k) + " interruption(s) in " +
                                      seconds_text(ran) + " s of running)"};
}

std::string FailureHistory::summary(double now) const {
  int crashed = 0, stopped = 0;
  const std::size_t before = begun_ ? attempts_.size() - 1 : attempts_.size();
  for (std::size_t i = 0; i < before; ++i) {
    crashed += attempts_[i].end == End::running ? 1 : 0;
    stopped += attempts_[i].end == End::stopped ? 1 : 0;
  }
  std::string out = "attempt " + std::to_string(carried_attempts_ + static_cast<long>(attempts_.size())) + "; " +
                    std::to_string(interruptions()) + " interruption(s) in " + seconds_text(running_seconds(now)) +
                    " s of running";
  if (crashed + stopped > 0)
    out += " (" + std::to_string(crashed) + " crashed or killed, " + std::to_string(stopped) + " stopped by a signal" +
           (carried_interruptions_ > 0 ? ", and " + std::to_string(carried_interruptions_) + " older" : "") + ")";
  return out;
}

bool restarted_from_env(const char* attempt, const char* torch_restarts, const char* slurm_restarts) {
  auto above = [](const char* v, long floor) { return v != nullptr && *v != '\0' && std::strtol(v, nullptr, 10) > floor; };
  return above(attempt, 1) || above(torch_restarts, 0) || above(slurm_restarts, 0);
}

}  // namespace saker::train
