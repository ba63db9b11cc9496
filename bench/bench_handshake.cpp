// bench_handshake: what the job-key handshake (launcher/comm/auth.hpp) costs.
//   1. per link: connect + handshake against connect + the bare claim (Transit::off), over
//      loopback TCP, median of many links;
//   2. allreduce with auth against Transit::off: two forked ranks on a TCP ring (a node
//      each), each holding an auth and an off communicator measured in back-to-back block
//      pairs: 4 KiB latency (500 calls a block) and 64 MiB busbw, ratios per pair.
// The targets (issue 28): handshake <= 2 ms per link, auth/off >= 0.99x busbw at 64 MiB
// and <= 1.05x latency at 4 KiB. Pairing keeps a shared machine's load out of the ratio.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/forked_ranks.hpp"
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

// Per block pair: auth and off measured back to back in the same two processes, so that
// the machine's load (shared cores) hits both alike; ratios are per pair.
struct Figures {
  std::vector<double> lat_auth, lat_off, bw_auth, bw_off;  // us, GB/s per block
};

double lat_block(Communicator& c, std::vector<float>& small) {
  for (int i = 0; i < 100; ++i) c.allreduce(small.data(), small.size(), DataType::f32);
  auto t0 = Clock::now();
  for (int i = 0; i < 500; ++i) c.allreduce(small.data(), small.size(), DataType::f32);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 500;
}

double bw_once(Communicator& c, std::vector<float>& big) {
  auto t0 = Clock::now();
  c.allreduce(big.data(), big.size(), DataType::f32);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(big.size() * sizeof(float)) * 2 * (2 - 1) / 2 / s / 1e9;  // busbw = algbw * 2(n-1)/n
}

// Rank r of 2: one communicator with auth, one with Transit::off (each over its own store);
// rank 0 writes its figures to fd out.
void rank_main(int r, int port_auth, int port_off, int blocks, int out) {
  auto make = [&](Transit t, int port) {
    Options o;
    o.ignore_environment = true;
    o.fusion = false;
    o.transit = t;
    o.job_key = std::string(32, '\x42');
    o.transport = Transport::ring;
    return Communicator::create(make_tcp_store("127.0.0.1", port, o), Placement{r, 2, "node" + std::to_string(r), "h", -1}, o);
  };
  auto with = make(Transit::auth, port_auth);
  auto without = make(Transit::off, port_off);
  std::vector<float> small(1024, 1.0f), big(16u << 20, 1.0f);  // 4 KiB, 64 MiB
  Figures f;
  bw_once(*with, big);
  bw_once(*without, big);
  for (int b = 0; b < blocks; ++b) {
    bool auth_first = b % 2 == 0;  // alternate which goes first
    for (int k = 0; k < 2; ++k) {
      bool a = (k == 0) == auth_first;
      (a ? f.lat_auth : f.lat_off).push_back(lat_block(a ? *with : *without, small));
      (a ? f.bw_auth : f.bw_off).push_back(bw_once(a ? *with : *without, big));
    }
  }
  with->barrier();
  without->barrier();
  if (r == 0)
    for (auto* v : {&f.lat_auth, &f.lat_off, &f.bw_auth, &f.bw_off})
      if (write(out, v->data(), v->size() * sizeof(double)) < 0) std::perror("bench_handshake: write");
}

Figures allreduce_run(int blocks) {
  Options so;
  so.job_key = std::string(32, '\x42');
  TcpStoreServer store_auth(0, so, "127.0.0.1");
  so.transit = Transit::off;
  TcpStoreServer store_off(0, so, "127.0.0.1");
  Figures f;
  for (auto* v : {&f.lat_auth, &f.lat_off, &f.bw_auth, &f.bw_off}) v->resize(static_cast<std::size_t>(blocks));
  // Rank 0 writes the four series one after another; read them into one buffer.
  std::vector<double> all(4 * static_cast<std::size_t>(blocks));
  saker::bench::run_forked_ranks(2, "bench_handshake", all.data(), all.size() * sizeof(double), [&](int r, int out) {
    rank_main(r, store_auth.port(), store_off.port(), blocks, out);
  });
  std::size_t at = 0;
  for (auto* v : {&f.lat_auth, &f.lat_off, &f.bw_auth, &f.bw_off})
    for (double& x : *v) x = all[at++];
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
  std::printf("allreduce fp32, 2 ranks on a TCP ring (forked, a node each), an auth and an off communicator in the "
              "same processes, %d block pairs back to back (order alternating):\n", rounds * 3);
  Figures f = allreduce_run(rounds * 3);
  std::vector<double> lat_ratio, bw_ratio;
  for (std::size_t b = 0; b < f.lat_auth.size(); ++b) {
    lat_ratio.push_back(f.lat_auth[b] / f.lat_off[b]);
    bw_ratio.push_back(f.bw_auth[b] / f.bw_off[b]);
  }
  auto span = [](const char* what, const std::vector<double>& v, const char* unit) {
    std::printf("  %s: median %.3f%s [%.3f-%.3f]\n", what, median(v), unit, *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  };
  span("4 KiB latency, auth ", f.lat_auth, " us");
  span("4 KiB latency, off  ", f.lat_off, " us");
  span("64 MiB busbw, auth  ", f.bw_auth, " GB/s");
  span("64 MiB busbw, off   ", f.bw_off, " GB/s");
  span("4 KiB latency auth/off per pair (target <= 1.05x)", lat_ratio, "x");
  span("64 MiB busbw auth/off per pair (target >= 0.99x)", bw_ratio, "x");
  return 0;
}
