#include "launcher/run/process.hpp"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace saker::run {
namespace {

std::vector<char*> as_argv(const std::vector<std::string>& args) {
  std::vector<char*> out;
  out.reserve(args.size() + 1);
  for (const std::string& a : args) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

void apply_env(const Env& overrides) {
  for (const auto& [name, value] : overrides) ::setenv(name.c_str(), value.c_str(), 1);
}

}  // namespace

SignalWatcher::SignalWatcher(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, &original_) != 0) {
    throw Error(explain("cannot block signals", std::strerror(errno), "this is a bug; report it"));
  }
  fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) {
    throw Error(explain("cannot create a signalfd", std::strerror(errno), "check ulimit -n"));
  }
}

SignalWatcher::~SignalWatcher() {
  if (fd_ >= 0) ::close(fd_);
  sigprocmask(SIG_SETMASK, &original_, nullptr);
}

int SignalWatcher::wait(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, timeout_ms);
  if (ready <= 0) return 0;
  signalfd_siginfo info{};
  const ssize_t n = ::read(fd_, &info, sizeof info);
  if (n != static_cast<ssize_t>(sizeof info)) return 0;
  return static_cast<int>(info.ssi_signo);
}

pid_t spawn(const std::vector<std::string>& argv, const Env& overrides, const sigset_t& child_mask, int stderr_fd) {
  SAKER_ASSERT(!argv.empty(), "spawn needs a program");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(explain("cannot start " + argv[0], std::strerror(errno), "check the process limit (ulimit -u)"));
  }
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    if (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0) std::_Exit(127);
    apply_env(overrides);
    std::vector<char*> args = as_argv(argv);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "saker: error: cannot execute %s: %s; check the path and its permissions\n",
                 argv[0].c_str(), std::strerror(errno));
    std::_Exit(127);
  }
  return pid;
}

void exec_with_env(const std::vector<std::string>& argv, const Env& overrides) {
  SAKER_ASSERT(!argv.empty(), "exec needs a program");
  apply_env(overrides);
  std::vector<char*> args = as_argv(argv);
  std::fflush(nullptr);
  ::execvp(args[0], args.data());
  throw Error(explain("cannot execute " + argv[0], std::strerror(errno), "check the path and its permissions"));
}

double wall_clock() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace saker::run
