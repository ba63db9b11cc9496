#include "launcher/comm/net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::comm::net {

int poll_ms(Deadline d, int cap_ms) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, cap_ms));
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void tune_stream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // No SO_SNDBUF/SO_RCVBUF: setting them switches off the kernel's buffer
  // autotuning (up to net.ipv4.tcp_rmem/wmem max), and a fixed 4 MiB made the
  // 64 MiB ring ~15% slower over loopback here (bench_allreduce, tcp mode).
}

static addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string p = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(explain("cannot resolve host '" + host + "'", gai_strerror(rc),
                        "check the name, or set SAKER_COMM_ADDR / SAKER_STORE to an IP address"));
  return res;
}

Fd listen_on(const std::string& bind_address, int port, int* bound) {
  addrinfo* ai = resolve(bind_address, port, true);
  Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = bind(fd.get(), ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc != 0 || listen(fd.get(), 512) != 0)
    throw Error(explain("cannot listen on " + bind_address + ":" + std::to_string(port),
                        std::strerror(errno),
                        "pick another port (SAKER_STORE / SAKER_STORE_PORT) or stop what holds it"));
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  if (bound) *bound = ntohs(sa.sin_port);
  return fd;
}

Fd connect_to(const std::string& host, int port, Deadline deadline, const std::string& what) {
  std::string last = "no attempt";
  for (int attempt = 0;; ++attempt) {
    addrinfo* ai = resolve(host, port, false);
    Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    set_nonblocking(fd.get(), true);
    int rc = connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      if (poll(&p, 1, poll_ms(deadline, 1000)) == 1) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      set_nonblocking(fd.get(), false);
      tune_stream(fd.get());
      return fd;
    }
    last = std::strerror(errno);
    if (Clock::now() >= deadline)
      throw Error(explain("cannot connect to " + what + " at " + host + ":" + std::to_string(port),
                          last + " (kept retrying until the timeout)",
                          "check that the peer started and that the address/port is reachable; "
                          "raise SAKER_COMM_TIMEOUT if it starts slowly"));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200, 5 << std::min(attempt, 5))));
  }
}

Fd accept_until(int listen_fd, Deadline deadline) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    int ms = poll_ms(deadline);
    int rc = poll(&p, 1, ms);
    if (rc == 1) {
      Fd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (fd) {
        tune_stream(fd.get());
        return fd;
      }
    }
    if (Clock::now() >= deadline) return Fd();
  }
}

static std::string transfer_error(const std::string& what, const char* verb, int err) {
  if (err == 0)
    return what + " closed the connection while " + verb + " (the process exited or was killed)";
  if (err == ETIMEDOUT)
    return what + " did not answer within the timeout while " + verb +
           " (hung, stopped or unreachable; raise SAKER_COMM_TIMEOUT if it is only slow)";
  return what + " failed while " + verb + ": " + std::strerror(err);
}

void send_all(int fd, const void* data, std::size_t len, Deadline d, const std::string& what) {
  auto* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) { p += n; len -= static_cast<std::size_t>(n); continue; }
    if (n < 0 && errno != EAGAIN && errno != EINTR) throw Error(transfer_error(what, "sending", errno));
    pollfd pf{fd, POLLOUT, 0};
    if (poll(&pf, 1, poll_ms(d)) == 0 && Clock::now() >= d)
      throw Error(transfer_error(what, "sending", ETIMEDOUT));
  }
}

void recv_all(int fd, void* data, std::size_t len, Deadline d, const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) { p += n; len -= static_cast<std::size_t>(n); continue; }
    if (n == 0) throw Error(transfer_error(what, "receiving", 0));
    if (errno != EAGAIN && errno != EINTR) throw Error(transfer_error(what, "receiving", errno));
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, poll_ms(d)) == 0 && Clock::now() >= d)
      throw Error(transfer_error(what, "receiving", ETIMEDOUT));
  }
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

namespace {

std::string first_interface_address() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "127.0.0.1";
  std::string out = "127.0.0.1";
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
      continue;
    char text[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    out = text;
    break;
  }
  freeifaddrs(all);
  return out;
}

}  // namespace

std::string advertised_address() {
  if (const char* a = std::getenv("SAKER_COMM_ADDR"); a && *a) return a;
  const std::string name = host_name();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc == 0) {
    freeaddrinfo(res);
    return name;
  }
  static const std::string fallback = [&] {
    std::string ip = first_interface_address();
    log::warn("comm: this host's name '" + name + "' does not resolve (" + gai_strerror(rc) + "); peers will reach it at " +
              ip + " (fix: add the name to /etc/hosts or DNS, or set SAKER_COMM_ADDR)");
    return ip;
  }();
  return fallback;
}

}  // namespace saker::comm::net
