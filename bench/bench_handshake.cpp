// bench_handshake: what the job-key handshake (launcher/comm/auth.hpp) costs.
//   1. per link: connect + handshake against connect + the bare claim (Transit::off), over
//      loopback TCP, median of many links;
//   2. allreduce with auth against Transit::off: two forked ranks on a TCP ring (a node
//      each), 4 KiB latency (median of the rounds' medians) and 64 MiB busbw.
// The targets (issue 28): handshake <= 2 ms per link, auth/off >= 0.99x busbw at 64 MiB
// and <= 1.05x latency at 4 KiB. Modes alternate round by round so drift hits both.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "launcher/comm/auth.hpp"
#include "launcher/comm/net.hpp"
#include "saker/comm.hpp"

using namespace saker::comm;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool any_kind(auth::Kind) { return true; }

// Median microseconds to open one link: connect, then the handshake (or the bare claim).
double link_us(bool authenticated, int links) {
  int port = 0;
  net::Fd listener = net::listen_on("127.0.0.1", 0, &port);
  auth::Context ctx{auth::JobKey::generate(), "job bench step 0"};
  std::thread server([&] {
    for (int i = 0; i < links; ++i) {
      net::Fd fd = net::accept_until(listener.get(), net::deadline_in(std::chrono::seconds(10)));
      if (!fd) return;
      auto d = net::deadline_in(std::chrono::seconds(10));
      if (authenticated) auth::accept_handshake(fd.get(), ctx, 0, 2, any_kind, d, "bench client");
      else auth::recv_claim(fd.get(), 2, d, "bench client");
    }
  });
  std::vector<double> us;
  for (int i = 0; i < links; ++i) {
    auto t0 = Clock::now();
    auto d = net::deadline_in(std::chrono::seconds(10));
    net::Fd fd = net::connect_to("127.0.0.1", port, d, "bench server");
    auth::Claim claim{auth::Kind::link, 1, 0, 0};
    if (authenticated) auth::connect_handshake(fd.get(), ctx, claim, d, "bench server");
    else auth::send_claim(fd.get(), claim, d, "bench server");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  server.join();
  return median(us);
}

struct Figures {
  double lat_us = 0, busbw_gbs = 0;
};

// Rank r of 2 over the store at port; rank 0 writes its figures to fd out.
void rank_main(int r, int port, Transit transit, int out) {
  Options o;
  o.ignore_environment = true;
  o.fusion = false;
  o.transit = transit;
  o.job_key = std::string(32, '\x42');
  o.transport = Transport::ring;
  auto c = Communicator::create(make_tcp_store("127.0.0.1", port, o), Placement{r, 2, "node" + std::to_string(r), "h", -1}, o);
  std::vector<float> small(1024, 1.0f), big(16u << 20, 1.0f);  // 4 KiB, 64 MiB
  std::vector<double> lat;
  for (int block = 0; block < 5; ++block) {
    for (int i = 0; i < 200; ++i) c->allreduce(small.data(), small.size(), DataType::f32);
    auto t0 = Clock::now();
    for (int i = 0; i < 1000; ++i) c->allreduce(small.data(), small.size(), DataType::f32);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 1000);
  }
  std::vector<double> bw;
  c->allreduce(big.data(), big.size(), DataType::f32);
  for (int i = 0; i < 7; ++i) {
    auto t0 = Clock::now();
    c->allreduce(big.data(), big.size(), DataType::f32);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    bw.push_back(64.0 * (1 << 20) * 2 * (2 - 1) / 2 / s / 1e9);  // busbw = algbw * 2(n-1)/n
  }
  c->barrier();
  if (r == 0) {
    Figures f{median(lat), median(bw)};
    if (write(out, &f, sizeof f) != sizeof f) std::perror("bench_handshake: write");
  }
}

Figures allreduce_run(Transit transit) {
  Options so;
  so.transit = transit;
  so.job_key = std::string(32, '\x42');
  TcpStoreServer store(0, so, "127.0.0.1");
  int pipefd[2];
  if (pipe(pipefd) != 0) return {};
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      try {
        rank_main(r, store.port(), transit, pipefd[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_handshake: rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  Figures f;
  if (read(pipefd[0], &f, sizeof f) != sizeof f) std::fprintf(stderr, "bench_handshake: no figures from rank 0\n");
  close(pipefd[0]);
  close(pipefd[1]);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::printf("job-key handshake per link over loopback TCP (median of 500 links, connect included):\n");
  std::vector<double> with, without;
  for (int r = 0; r < rounds; ++r) {
    without.push_back(link_us(false, 500));
    with.push_back(link_us(true, 500));
  }
  double h = median(with), b = median(without);
  std::printf("  off %.1f us, auth %.1f us: the handshake adds %.1f us per link (target <= 2000 us)\n", b, h, h - b);
  std::printf("  rounds (auth): ");
  for (double x : with) std::printf("%.1f ", x);
  std::printf("us\n");
  std::printf("allreduce fp32, 2 ranks on a TCP ring (forked, a node each); auth vs Transit::off, %d interleaved rounds:\n",
              rounds);
  std::vector<double> lat_a, lat_o, bw_a, bw_o;
  for (int r = 0; r < rounds; ++r) {
    Figures a = allreduce_run(Transit::auth), o = allreduce_run(Transit::off);
    lat_a.push_back(a.lat_us);
    lat_o.push_back(o.lat_us);
    bw_a.push_back(a.busbw_gbs);
    bw_o.push_back(o.busbw_gbs);
    std::printf("  round %d: 4 KiB %.1f us (auth) / %.1f us (off); 64 MiB busbw %.2f / %.2f GB/s\n", r, a.lat_us,
                o.lat_us, a.busbw_gbs, o.busbw_gbs);
  }
  auto span = [](const char* what, const std::vector<double>& v, const char* unit) {
    std::printf("  %s: median %.2f %s [%.2f-%.2f]\n", what, median(v), unit, *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  };
  span("4 KiB latency, auth", lat_a, "us");
  span("4 KiB latency, off ", lat_o, "us");
  span("64 MiB busbw, auth ", bw_a, "GB/s");
  span("64 MiB busbw, off  ", bw_o, "GB/s");
  double lr = median(lat_a) / median(lat_o), br = median(bw_a) / median(bw_o);
  std::printf("  median: 4 KiB latency auth/off = %.3fx (target <= 1.05x); 64 MiB busbw auth/off = %.3fx (target >= 0.99x)\n",
              lr, br);
  return 0;
}
