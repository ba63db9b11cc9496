// Floods of silent connections, as another user would send them against a job's store or
// a rank's link listener (issue 28: denial of service). Each flood runs in a child
// process, so its descriptors are its own (the victim's limit is what it tries to
// exhaust); the child only makes system calls.
#pragma once

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

namespace saker::comm::test {

namespace flood_detail {

inline sockaddr_in loopback(int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sa;
}

// A silent connection to 127.0.0.1:port, or -1.
inline int open_silent(const sockaddr_in& sa) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

inline void allow_fds(int n) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = std::min<rlim_t>(r.rlim_max, static_cast<rlim_t>(n) + 64);
  setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace flood_detail

// Opens n silent connections to port and holds them until destroyed.
struct SilentFlood {
  pid_t pid = -1;
  SilentFlood(int port, int n) {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      flood_detail::allow_fds(n);
      const sockaddr_in sa = flood_detail::loopback(port);
      int made = 0;
      while (made < n && flood_detail::open_silent(sa) >= 0) ++made;
      if (write(ready[1], &made, sizeof made) < 0) {}
      while (true) pause();
    }
    close(ready[1]);
    int made = 0;
    REQUIRE(read(ready[0], &made, sizeof made) == static_cast<ssize_t>(sizeof made));
    close(ready[0]);
    REQUIRE(made == n);
  }
  ~SilentFlood() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

// Keeps n silent connections to port open from 127.0.0.1: each one the victim drops is
// counted and replaced at once, so a listener that makes room for newcomers is pushed
// on without end. closed() is how many the victim has dropped so far.
struct ChurningFlood {
  pid_t pid = -1;
  std::atomic<long>* dropped = nullptr;  // shared with the child

  ChurningFlood(int port, int n) {
    void* shared = mmap(nullptr, sizeof(std::atomic<long>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(shared != MAP_FAILED);
    dropped = new (shared) std::atomic<long>(0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) churn(port, n);
  }
  ~ChurningFlood() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    munmap(dropped, sizeof(std::atomic<long>));
  }
  long closed() const { return dropped->load(); }
  // Waits until the victim has dropped at least `count` (true), or `within` passed.
  bool wait_closed(long count, std::chrono::seconds within) const {
    const auto end = std::chrono::steady_clock::now() + within;
    while (closed() < count) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  [[noreturn]] void churn(int port, int n) {
    flood_detail::allow_fds(n);
    const sockaddr_in sa = flood_detail::loopback(port);
    std::vector<pollfd> fds(static_cast<std::size_t>(n), pollfd{-1, POLLIN, 0});
    while (true) {
      for (auto& p : fds)
        if (p.fd < 0) p.fd = flood_detail::open_silent(sa);
      if (poll(fds.data(), fds.size(), 10) <= 0) continue;
      for (auto& p : fds) {
        if (p.fd < 0 || p.revents == 0) continue;
        char b;
        const ssize_t got = recv(p.fd, &b, 1, MSG_DONTWAIT);
        if (got > 0 || (got < 0 && errno == EAGAIN)) continue;  // said something, or nothing yet
        if (got == 0) dropped->fetch_add(1);  // the victim closed it (a refused connect is not counted)
        close(p.fd);
        p.fd = -1;
      }
    }
  }
};

// This process's descriptor limit set to soft (what a rank usually has: 1024), restored after.
struct FdLimit {
  rlimit old{};
  explicit FdLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &old);
    rlimit r = old;
    r.rlim_cur = std::min(soft, old.rlim_max);
    setrlimit(RLIMIT_NOFILE, &r);
  }
  ~FdLimit() { setrlimit(RLIMIT_NOFILE, &old); }
};

}  // namespace saker::comm::test
