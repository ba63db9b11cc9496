// Child processes and signals for saker-run: one place that blocks the signals it
// cares about, reads them synchronously (signalfd), and starts children with the
// original mask so the children see signals normally.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "launcher/run/rank_env.hpp"

namespace saker::run {

class SignalWatcher {
 public:
  // Blocks `signals` and SIGCHLD in this (single-threaded) process and reads them
  // through a signalfd. The original mask is restored on destruction.
  explicit SignalWatcher(std::initializer_list<int> signals);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Waits up to timeout_ms for one signal; returns its number, or 0 on timeout.
  int wait(int timeout_ms);
  const sigset_t& original_mask() const { return original_; }

 private:
  sigset_t original_{};
  int fd_ = -1;
};

// Starts argv[0] (searched in PATH) with the current environment plus `overrides`,
// with the signal mask `child_mask`. Throws saker::Error if the fork fails; an exec
// failure makes the child exit 127 after printing why. With stderr_fd >= 0 the child's
// stderr is that descriptor.
pid_t spawn(const std::vector<std::string>& argv, const Env& overrides, const sigset_t& child_mask,
            int stderr_fd = -1);

// Replaces this process with argv (PATH search), adding `overrides` to the
// environment. Only returns by throwing saker::Error.
[[noreturn]] void exec_with_env(const std::vector<std::string>& argv, const Env& overrides);

// Seconds since the Unix epoch, with sub-second precision (for logs tests parse).
double wall_clock();

}  // namespace saker::run
