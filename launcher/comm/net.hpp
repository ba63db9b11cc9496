// Thin POSIX socket helpers with deadlines: every blocking step is a poll() bounded by
// a deadline, so nothing in the library can wait forever on a silent peer.
#pragma once

#include <chrono>
#include <string>

namespace saker::comm::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_in(std::chrono::milliseconds ms) { return Clock::now() + ms; }
// Milliseconds left before d, clamped to [0, cap] for poll().
int poll_ms(Deadline d, int cap_ms = 100);

// An owned file descriptor (move-only).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) { reset(); fd_ = o.release(); }
    return *this;
  }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Listens on bind_address:port (0: any free port); returns the bound port in *bound.
Fd listen_on(const std::string& bind_address, int port, int* bound);
// Connects, retrying refused/unreachable attempts until the deadline (the peer may not
// listen yet). Throws saker::Error naming what on failure.
Fd connect_to(const std::string& host, int port, Deadline deadline, const std::string& what);
// Accepts one connection or returns an empty Fd when the deadline passes.
Fd accept_until(int listen_fd, Deadline deadline);

void set_nonblocking(int fd, bool on);
void tune_stream(int fd);  // TCP_NODELAY (buffers stay autotuned)

// Blocking-with-deadline full transfers. They throw saker::Error whose text starts
// with what (e.g. "rank 3 on node7") and says why (closed, reset, timed out).
void send_all(int fd, const void* data, std::size_t len, Deadline d, const std::string& what);
void recv_all(int fd, void* data, std::size_t len, Deadline d, const std::string& what);

std::string host_name();
// The address peers should use to reach this host: SAKER_COMM_ADDR, else the host name
// when it resolves, else (a machine without its name in /etc/hosts or DNS, e.g. a bare
// root filesystem) the first up non-loopback IPv4 interface's address, else 127.0.0.1;
// the fallback is logged once with the fix.
std::string advertised_address();

}  // namespace saker::comm::net
