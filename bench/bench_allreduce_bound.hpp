// The transport's own bound for bench_allreduce, measured in the same run as the
// collectives: what one TCP stream carries per direction while the other direction
// runs at the same time (as a two-rank ring does: each rank sends and receives at
// once), and what one core's memcpy moves. A collective over TCP cannot beat the first
// (every byte of busbw crosses such a stream); the second bounds the shared-memory
// path and every copy the kernel makes for a loopback stream.
//
// Two processes (BOUND_RANK 0 and 1) meet on 127.0.0.1 (or BOUND_ADDR for an emulated
// wire), at the port rank 0 writes to BOUND_PORTFILE; each sends kStreamBytes while it receives as much, 7 times, in
// each of two ways: a sender thread beside a blocking receive (best with a spare
// core), and one thread alternating non-blocking sends and receives (best when the
// ranks already fill the cores); and each way from two buffers: one of kStreamBytes
// (every byte comes from and goes to memory) and one of kWindowBytes sent over and over
// (the buffers stay in cache, as a collective that works block by block keeps them: a
// bound measured only the first way was beaten 1.8x by Saker's blocked ring). Rank 0
// prints "stream <GB/s median> <min> <max>" per direction for the best of the four,
// and "memcpy <GB/s median> <min> <max>" (both ranks copying at once, as the ranks of a
// collective do).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

constexpr std::size_t kStreamBytes = 64u << 20;
constexpr std::size_t kWindowBytes = 2u << 20;  // fits a core's share of any recent L3
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

// Sends out on sfd and receives into in on rfd at once from one thread (non-blocking).
inline bool duplex_one_thread(int sfd, int rfd, const char* out, char* in, std::size_t n) {
  std::size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    bool progress = false;
    if (sent < n) {
      ssize_t k = ::send(sfd, out + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) { sent += static_cast<std::size_t>(k); progress = true; }
      else if (k < 0 && errno != EAGAIN) return false;
    }
    if (got < n) {
      ssize_t k = ::recv(rfd, in + got, n - got, MSG_DONTWAIT);
      if (k > 0) { got += static_cast<std::size_t>(k); progress = true; }
      else if (k == 0 || (k < 0 && errno != EAGAIN)) return false;
    }
    if (!progress) {
      pollfd p[2] = {{sfd, static_cast<short>(sent < n ? POLLOUT : 0), 0}, {rfd, static_cast<short>(got < n ? POLLIN : 0), 0}};
      poll(p, 2, 1000);
    }
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
  const char* pf = std::getenv("BOUND_PORTFILE");
  if (!r || !pf) {
    std::fprintf(stderr, "bench: --worker-bound needs BOUND_RANK and BOUND_PORTFILE\n");
    return 2;
  }
  int rank = std::atoi(r);
  const char* addr_env = std::getenv("BOUND_ADDR");
  std::string addr = addr_env && *addr_env ? addr_env : "127.0.0.1";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    std::fprintf(stderr, "bench: BOUND_ADDR='%s' is not an IPv4 address\n", addr.c_str());
    return 2;
  }
  // Rank 0 listens on a port the kernel picks and writes it to BOUND_PORTFILE (a fixed
  // port may be some other connection's ephemeral port on a shared machine). Two
  // connections, one per direction, as Saker's two-rank ring has: both directions on one
  // socket run slower (arriving data waits in the backlog while the owner is in send()),
  // and so a one-socket "bound" was beaten by the ring.
  int fd = -1, back = -1;
  if (rank == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof sa;
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, 2) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      std::fprintf(stderr, "bench: cannot listen on %s: %s\n", addr.c_str(), std::strerror(errno));
      return 1;
    }
    std::string tmp = std::string(pf) + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return 1;
    std::fprintf(f, "%d\n", ntohs(sa.sin_port));
    std::fclose(f);
    std::rename(tmp.c_str(), pf);
    fd = accept(l, nullptr, nullptr);
    back = accept(l, nullptr, nullptr);
    close(l);
  } else {
    for (int i = 0; i < 1000 && fd < 0; ++i) {
      int port = 0;
      if (FILE* f = std::fopen(pf, "r")) {
        if (std::fscanf(f, "%d", &port) != 1) port = 0;
        std::fclose(f);
      }
      if (port > 0) {
        sa.sin_port = htons(static_cast<std::uint16_t>(port));
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
          close(fd);
          fd = -1;
        }
      }
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (rank != 0 && fd >= 0) {  // the second connection, now that the port is known
    back = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(back, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      close(back);
      back = -1;
    }
  }
  if (fd < 0 || back < 0) {
    std::fprintf(stderr, "bench: the bound's stream could not connect to %s (port from %s)\n", addr.c_str(), pf);
    return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(back, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Rank 0 sends on the first connection and receives on the second; rank 1 the reverse.
  const int sfd = rank == 0 ? fd : back, rfd = rank == 0 ? back : fd;
  std::vector<char> out(kStreamBytes, 1), in(kStreamBytes);
  std::vector<double> way[4], copy;  // [thread, one loop] x [whole buffer, window]
  char token = 0;
  for (int b = 0; b <= kBoundBlocks; ++b)  // block 0 warms up (buffer autotuning)
    for (int w = 0; w < 4; ++w) {
      const std::size_t piece = w < 2 ? kStreamBytes : kWindowBytes;
      // Start together: a one-byte handshake each way.
      if (!send_full(fd, &token, 1) || !recv_full(fd, &token, 1)) return 1;
      auto t0 = std::chrono::steady_clock::now();
      bool ok = true;
      if (w % 2 == 0) {
        bool sent = true;
        std::thread sender([&] {
          for (std::size_t done = 0; sent && done < kStreamBytes; done += piece) sent = send_full(sfd, out.data(), piece);
        });
        for (std::size_t done = 0; ok && done < kStreamBytes; done += piece) ok = recv_full(rfd, in.data(), piece);
        sender.join();
        ok = ok && sent;
      } else {
        for (std::size_t done = 0; ok && done < kStreamBytes; done += piece) ok = duplex_one_thread(sfd, rfd, out.data(), in.data(), piece);
      }
      if (!ok) return 1;
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (b > 0) way[w].push_back(static_cast<double>(kStreamBytes) / s / 1e9);
    }
  std::vector<double>* stream = &way[0];
  for (auto& w : way) {
    std::sort(w.begin(), w.end());
    if (w[w.size() / 2] > (*stream)[stream->size() / 2]) stream = &w;
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
  close(back);
  if (rank == 0) {
    print_stats("stream", *stream);
    print_stats("memcpy", copy);
  }
  return 0;
}

}  // namespace bench
