// The transport's own bound for bench_allreduce, measured in the same run as the
// collectives: what one TCP stream carries per direction while the other direction
// runs at the same time (as a two-rank ring does: each rank sends and receives at
// once), and what one core's memcpy moves. A collective over TCP cannot beat the first
// (every byte of busbw crosses such a stream); the second bounds the shared-memory
// path and every copy the kernel makes for a loopback stream.
//
// Two processes (BOUND_RANK 0 and 1) meet on 127.0.0.1:BOUND_PORT (or BOUND_ADDR for
// an emulated wire); each sends kStreamBytes on a thread while its main thread
// receives as much, 7 times; rank 0 prints "stream <GB/s median> <min> <max>" (per
// direction) and "memcpy <GB/s median> <min> <max>" (both ranks copying at once, as
// the ranks of a collective do).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

constexpr std::size_t kStreamBytes = 64u << 20;
constexpr int kBoundBlocks = 7;

inline bool send_full(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

inline bool recv_full(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Median, min, max of v (sorted in place).
inline void print_stats(const char* what, std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  std::printf("%s %.4f %.4f %.4f\n", what, v[v.size() / 2], v.front(), v.back());
}

// One end of the bound measurement; returns the process's exit status.
inline int bound_worker() {
  const char* r = std::getenv("BOUND_RANK");
  const char* p = std::getenv("BOUND_PORT");
  if (!r || !p) {
    std::fprintf(stderr, "bench: --worker-bound needs BOUND_RANK and BOUND_PORT\n");
    return 2;
  }
  int rank = std::atoi(r), port = std::atoi(p);
  const char* addr_env = std::getenv("BOUND_ADDR");
  std::string addr = addr_env && *addr_env ? addr_env : "127.0.0.1";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    std::fprintf(stderr, "bench: BOUND_ADDR='%s' is not an IPv4 address\n", addr.c_str());
    return 2;
  }
  int fd = -1;
  if (rank == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, 1) != 0) {
      std::fprintf(stderr, "bench: cannot listen on %s:%d: %s\n", addr.c_str(), port, std::strerror(errno));
      return 1;
    }
    fd = accept(l, nullptr, nullptr);
    close(l);
  } else {
    for (int i = 0; i < 500 && fd < 0; ++i) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        close(fd);
        fd = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  if (fd < 0) {
    std::fprintf(stderr, "bench: bound stream could not connect to %s:%d\n", addr.c_str(), port);
    return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> out(kStreamBytes, 1), in(kStreamBytes);
  std::vector<double> stream, copy;
  char token = 0;
  for (int b = 0; b <= kBoundBlocks; ++b) {  // block 0 warms up (buffer autotuning)
    // Start together: a one-byte handshake each way.
    if (!send_full(fd, &token, 1) || !recv_full(fd, &token, 1)) return 1;
    auto t0 = std::chrono::steady_clock::now();
    bool sent = false;
    std::thread sender([&] { sent = send_full(fd, out.data(), out.size()); });
    bool got = recv_full(fd, in.data(), in.size());
    sender.join();
    if (!sent || !got) return 1;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (b > 0) stream.push_back(static_cast<double>(kStreamBytes) / s / 1e9);
  }
  for (int b = 0; b <= kBoundBlocks; ++b) {
    if (!send_full(fd, &token, 1) || !recv_full(fd, &token, 1)) return 1;
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(in.data(), out.data(), kStreamBytes);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (b > 0) copy.push_back(static_cast<double>(kStreamBytes) / s / 1e9);
    out[static_cast<std::size_t>(b)] = in[kStreamBytes - 1 - static_cast<std::size_t>(b)];  // keep the copy live
  }
  close(fd);
  if (rank == 0) {
    print_stats("stream", stream);
    print_stats("memcpy", copy);
  }
  return 0;
}

}  // namespace bench
