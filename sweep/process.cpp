#include "sweep/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/error.hpp"

namespace saker::sweep {

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_forwarded = 0;

constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGUSR2, SIGINT};

void forward(int sig, siginfo_t* info, void*) {
  g_forwarded = sig;
  // SI_KERNEL: the terminal's signal to the foreground process group, the child's too.
  const bool from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  if (g_child > 0 && !from_terminal) ::kill(static_cast<pid_t>(g_child), sig);
}

void catch_signals() {
  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) ::sigaction(sig, &sa, nullptr);
}

// In the child: environment, directory, then exec; never returns.
[[noreturn]] void exec_child(const Command& cmd) {
  for (const auto& [k, v] : cmd.env) ::setenv(k.c_str(), v.c_str(), 1);
  if (!cmd.cwd.empty() && ::chdir(cmd.cwd.c_str()) != 0) {
    const std::string msg = "saker-sweep: cannot enter " + cmd.cwd.string() + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  std::vector<char*> argv;
  for (const auto& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const std::string msg = "saker-sweep: cannot run " + cmd.argv[0] + ": " + std::strerror(errno) +
                          " (check the command's program name and PATH)\n";
  (void)!::write(2, msg.data(), msg.size());
  ::_exit(127);
}

int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

}  // namespace

int forwarded_signal() { return g_forwarded; }

SignalScope::SignalScope() {
  g_forwarded = 0;
  catch_signals();
}

SignalScope::~SignalScope() {
  for (int sig : kSignals) ::signal(sig, SIG_DFL);
  g_forwarded = 0;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal " + std::to_string(sig);
  }
}

int run_logged(const Command& cmd, const std::filesystem::path& log) {
  if (cmd.argv.empty()) throw Error("saker-sweep: an empty command");
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(explain("cannot open " + log.string(), std::strerror(errno), "check the sweep's dir:"));
  catch_signals();  // a signal received before (forwarded_signal()) is kept: the worker checks it
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    throw Error(explain("cannot fork", std::strerror(errno), "check the job's process limits"));
  }
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (int sig : kSignals) ::signal(sig, SIG_DFL);
    exec_child(cmd);
  }
  g_child = pid;
  ::close(fd);
  const int status = wait_status(pid);
  g_child = 0;
  return status;
}

Captured run_captured(const Command& cmd) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw Error(explain("cannot create a pipe", std::strerror(errno), "check the process's file limit"));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(explain("cannot fork", std::strerror(errno), "check the process limits"));
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    exec_child(cmd);
  }
  ::close(out[1]);
  ::close(err[1]);
  Captured c;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&c.out, &c.err};
  int open = 2;
  char buf[4096];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  c.status = wait_status(pid);
  return c;
}

std::string trim_end(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace saker::sweep
