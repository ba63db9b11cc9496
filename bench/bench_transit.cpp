// bench_transit: what encryption in transit costs (issue 28; saker-comm(3), ENCRYPTION IN
// TRANSIT, PERFORMANCE), in one run, under two machine conditions: as the machine is, and
// with a busy loop on every online CPU.
//   1. The AES-256-GCM bound, measured here with OpenSSL EVP (aead::Sealer/Opener on
//      256 KiB frames, the ring's default chunk): on 1, 2, ... every online CPU at once.
//   2. allreduce fp32 on a 2-rank TCP ring (forked ranks, a node each) at 4 KiB ... 64 MiB,
//      with Transit::off, auth, and encrypt under 1 and 2 crypto threads
//      (SAKER_COMM_CRYPTO_THREADS). Every configuration is a communicator in the same two
//      processes, measured in back-to-back blocks whose order rotates, so that a shared
//      machine's drift hits all alike; ratios are taken per block, against off, then
//      summed up as median [min-max] over the blocks. Beside each figure, rank 0's CPU time
//      per call (every thread, user and system), with the same ratios: on a loaded machine
//      the wall figures scatter with the wait for a core, the CPU time with the work done.
// Targets (issue 28): auth/off >= 0.99x busbw at 64 MiB and <= 1.05x latency at 4 KiB;
// encrypt >= 0.7x plaintext busbw at 64 MiB, np=2, beside the one-core AES bound.
// Usage: bench_transit [BLOCKS] [--threads=1,2] [--only=idle|busy] [--sizes=4096,67108864]
//                      [--configs=off,auth]   (BLOCKS default 5; every size and configuration)
// --configs=off alone (or auth alone) runs one configuration with no ratios: a process to
// profile (strace -f -c, valgrind --tool=callgrind --trace-children=yes) for one mode;
// --configs=off,auth,off2 adds a second off communicator, whose off2/off column shows how
// far two identical configurations scatter on this machine (auth/off can be read only
// against it). SAKER_COMM_SEND_THREAD=1 (or 0) pins every communicator's send-thread choice,
// which each one otherwise times and makes for itself (Ring::send_thread_for), so that
// two communicators may differ in it at 64 MiB whatever their transit.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/forked_ranks.hpp"
#include "launcher/comm/aead.hpp"
#include "saker/comm.hpp"

using namespace saker::comm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kFrame = 256 * 1024;
constexpr std::size_t kAllSizes[] = {4096, 65536, 1u << 20, 16u << 20, 64u << 20};
// The sizes measured (--sizes=): the first is the latency size when it is 4 KiB or less.
std::vector<std::size_t> g_sizes(std::begin(kAllSizes), std::end(kAllSizes));
std::size_t g_num_sizes = g_sizes.size();

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string spread(const std::vector<double>& v, const char* fmt = "%.2f") {
  if (v.empty()) return "-";
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char m[32], a[32], b[32], s[112];
  std::snprintf(m, sizeof m, fmt, median(v));
  std::snprintf(a, sizeof a, fmt, *lo);
  std::snprintf(b, sizeof b, fmt, *hi);
  std::snprintf(s, sizeof s, "%s [%s-%s]", m, a, b);
  return s;
}

std::string size_label(std::size_t bytes) {
  const std::size_t kib = bytes >> 10;
  return kib >= 1024 ? std::to_string(kib >> 10) + " MiB" : kib > 0 ? std::to_string(kib) + " KiB" : std::to_string(bytes) + " B";
}

struct Config {
  std::string name;
  Transit transit;
  int threads;  // SAKER_COMM_CRYPTO_THREADS
};

// CPU seconds (user + system, every thread) this process has used so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// One figure per size: 4 KiB the latency in us, the others busbw in GB/s
// (algbw * 2(n-1)/n = algbw at n=2); and the CPU time this rank spent per call, in us.
// Wall time on a loaded machine is mostly waiting for a core; the CPU time is the work
// a configuration costs (its spinning and polling included), so it scatters far less.
std::pair<double, double> measure(Communicator& c, std::vector<float>& buf, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);
  if (bytes <= 4096) {
    for (int i = 0; i < 20; ++i) c.allreduce(buf.data(), count, DataType::f32);
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) c.allreduce(buf.data(), count, DataType::f32);
    return {std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 200, (cpu_seconds() - cpu0) * 1e6 / 200};
  }
  const int calls = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 1, 32));
  c.allreduce(buf.data(), count, DataType::f32);  // this configuration's sockets warm again
  c.barrier();
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) c.allreduce(buf.data(), count, DataType::f32);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return {static_cast<double>(bytes) * calls / s / 1e9, (cpu_seconds() - cpu0) * 1e6 / calls};
}

// figures[(size * configs + config) * blocks + block], then the CPU times in the same
// order, written by rank 0 to fd out.
void rank_main(int r, const std::vector<Config>& configs, const std::vector<int>& ports, int blocks, int out) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (std::size_t k = 0; k < configs.size(); ++k) {
    Options o;
    o.ignore_environment = true;
    o.fusion = false;
    o.transit = configs[k].transit;
    o.job_key = std::string(32, '\x42');
    o.transport = Transport::ring;
    setenv("SAKER_COMM_CRYPTO_THREADS", std::to_string(configs[k].threads).c_str(), 1);
    comms.push_back(Communicator::create(make_tcp_store("127.0.0.1", ports[k], o),
                                         Placement{r, 2, "node" + std::to_string(r), "h", -1}, o));
  }
  // Large enough for every size measured and for the 1 MiB warm-up below.
  const std::size_t largest = std::max<std::size_t>(*std::max_element(g_sizes.begin(), g_sizes.end()), 1u << 20);
  std::vector<float> buf(largest / sizeof(float), 1.0f);
  for (auto& c : comms)
    for (std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 20, g_sizes[g_num_sizes - 1]})  // calibrate, warm
      c->allreduce(buf.data(), bytes / sizeof(float), DataType::f32);
  const std::size_t nc = configs.size(), nb = static_cast<std::size_t>(blocks);
  const std::size_t n = g_num_sizes * nc * nb;
  std::vector<double> figures(2 * n);
  for (std::size_t s = 0; s < g_num_sizes; ++s)
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t i = 0; i < nc; ++i) {
        const std::size_t k = (i + b) % nc;  // the order rotates block by block
        std::tie(figures[(s * nc + k) * nb + b], figures[n + (s * nc + k) * nb + b]) = measure(*comms[k], buf, g_sizes[s]);
      }
  for (auto& c : comms) c->barrier();
  if (r == 0 && write(out, figures.data(), figures.size() * sizeof(double)) < 0) std::perror("bench_transit: write");
}

// GB/s of sealing (or opening) 256 KiB frames for about `seconds` on `threads` threads at
// once: the sum over threads of each one's bytes over its own time.
double aes_gbs(bool open, int threads, double seconds) {
  std::vector<double> rate(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  auto one = [&](int t) {
    aead::Key key{};
    key[0] = 1;
    aead::Sealer s(key, "bench");
    std::vector<char> plain(kFrame, 'x'), back(kFrame);
    // Opening needs frames in sequence order: 64 of them, opened over and over by a
    // fresh opener (the key schedule, once per 16 MiB).
    std::vector<std::vector<unsigned char>> frames(open ? 64 : 1, std::vector<unsigned char>(kFrame + aead::kOverhead));
    if (open)
      for (auto& f : frames) s.seal(plain.data(), kFrame, f.data());
    ready.fetch_add(1);
    while (ready.load() < threads) std::this_thread::yield();
    std::uint64_t n = 0;
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (!open) {
        s.seal(plain.data(), kFrame, frames[0].data());
        n += kFrame;
        continue;
      }
      aead::Opener o(key, "bench");
      for (auto& f : frames) o.open(f.data(), back.data());
      n += frames.size() * kFrame;
    }
    rate[static_cast<std::size_t>(t)] = static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(one, t);
  for (auto& t : ts) t.join();
  double sum = 0;
  for (double r : rate) sum += r;
  return sum;
}

// A bound: the best of 7 short tries (the one least disturbed by whatever else runs).
double best_gbs(bool open, int threads) {
  double best = 0;
  for (int i = 0; i < 7; ++i) best = std::max(best, aes_gbs(open, threads, 0.15));
  return best;
}

// A busy loop on every online CPU while it lives (the loaded condition).
class BusyLoops {
 public:
  explicit BusyLoops(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

void aes_bound(int cores, double* seal1, double* open1) {
  std::printf("  AES-256-GCM (OpenSSL EVP in this process, 256 KiB frames, best of 7 tries of 0.15 s), GB/s in all:\n");
  for (int t = 1; t <= cores; t = t == cores ? cores + 1 : std::min(2 * t, cores)) {
    const double s = best_gbs(false, t), o = best_gbs(true, t);
    if (t == 1) *seal1 = s, *open1 = o;
    std::printf("    %d thread%s: seal %.2f, open %.2f (%.2fx one thread's seal)\n", t, t == 1 ? " " : "s", s, o, s / *seal1);
  }
}

void condition(const char* title, int blocks, const std::vector<Config>& configs, int cores) {
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("\n== %s (load average %.1f at start, %d online CPUs) ==\n", title, load[0], cores);
  double seal1 = 0, open1 = 0;
  const bool any_encrypt = std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.transit == Transit::encrypt; });
  if (any_encrypt) aes_bound(cores, &seal1, &open1);
  std::vector<std::unique_ptr<TcpStoreServer>> stores;
  std::vector<int> ports;
  for (const Config& c : configs) {
    Options so;
    so.transit = c.transit;
    so.job_key = std::string(32, '\x42');
    stores.push_back(std::make_unique<TcpStoreServer>(0, so, "127.0.0.1"));
    ports.push_back(stores.back()->port());
  }
  const std::size_t nc = configs.size(), nb = static_cast<std::size_t>(blocks);
  const std::size_t n = g_num_sizes * nc * nb;
  std::vector<double> f(2 * n);
  if (!saker::bench::run_forked_ranks(2, "bench_transit", f.data(), f.size() * sizeof(double),
                                      [&](int r, int out) { rank_main(r, configs, ports, blocks, out); }))
    return;
  auto at = [&](std::size_t s, std::size_t k, std::size_t b) { return f[(s * nc + k) * nb + b]; };
  std::printf("  allreduce fp32, 2 ranks on a TCP ring, %d blocks per size, configurations in rotating order:\n", blocks);
  std::printf("  %-7s %-22s", "size", (configs[0].name + " (us | GB/s busbw)").c_str());
  for (std::size_t k = 1; k < nc; ++k) std::printf(" %-22s", (configs[k].name + "/" + configs[0].name).c_str());
  std::printf("\n");
  std::vector<double> enc_auth_64m[8];
  for (std::size_t s = 0; s < g_num_sizes; ++s) {
    std::vector<double> base;
    for (std::size_t b = 0; b < nb; ++b) base.push_back(at(s, 0, b));
    std::printf("  %-7s %-22s", size_label(g_sizes[s]).c_str(), spread(base, "%.3g").c_str());
    for (std::size_t k = 1; k < nc; ++k) {
      std::vector<double> ratio;
      for (std::size_t b = 0; b < nb; ++b) ratio.push_back(at(s, k, b) / at(s, 0, b));
      std::printf(" %-22s", spread(ratio).c_str());
      if (s == g_num_sizes - 1 && k >= 2 && k < 8 && configs[1].transit == Transit::auth && configs[k].transit == Transit::encrypt)
        for (std::size_t b = 0; b < nb; ++b) enc_auth_64m[k].push_back(at(s, k, b) / at(s, 1, b));
    }
    std::printf("%s\n", g_sizes[s] <= 4096 ? "   (latency ratios)" : "");
  }
  std::printf("  CPU time (user+system, all threads) of rank 0 per call, us; ratios per block against %s (lower is better):\n",
              configs[0].name.c_str());
  for (std::size_t s = 0; s < g_num_sizes; ++s) {
    std::vector<double> base;
    for (std::size_t b = 0; b < nb; ++b) base.push_back(f[n + (s * nc) * nb + b]);
    std::printf("  %-7s %-22s", size_label(g_sizes[s]).c_str(), spread(base, "%.5g").c_str());
    for (std::size_t k = 1; k < nc; ++k) {
      std::vector<double> ratio;
      for (std::size_t b = 0; b < nb; ++b) ratio.push_back(f[n + (s * nc + k) * nb + b] / std::max(1e-9, base[b]));
      std::printf(" %-22s", spread(ratio).c_str());
    }
    std::printf("\n");
  }
  std::vector<double> off64;
  for (std::size_t b = 0; b < nb; ++b) off64.push_back(at(g_num_sizes - 1, 0, b));
  const double crypto = 1.0 / (1.0 / seal1 + 1.0 / open1);
  for (std::size_t k = 2; k < nc && k < 8; ++k) {
    if (enc_auth_64m[k].empty()) continue;  // not an encrypt configuration
    // Each rank seals and opens every byte of busbw once. Where plaintext's own work
    // (the kernel's copies, the reduction) already fills the rank's core, crypto adds its
    // time per byte unless other cores take it: t threads on t spare cores divide it by t.
    const int t = configs[k].threads;
    const double ceiling = 1.0 / (1.0 / median(off64) + 1.0 / (crypto * t));
    std::printf("  %s %s/auth %s (target >= 0.70 at 64 MiB); ceiling with %d spare core%s per rank: %.2fx off\n",
                size_label(g_sizes[g_num_sizes - 1]).c_str(), configs[k].name.c_str(), spread(enc_auth_64m[k]).c_str(), t, t == 1 ? "" : "s", ceiling / median(off64));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 5;
  std::vector<int> threads = {1, 2};
  std::string only, wanted;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) {
      threads.clear();
      for (const char* p = a.c_str() + 10; *p;) {
        threads.push_back(std::max(1, std::atoi(p)));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
    } else if (a.rfind("--sizes=", 0) == 0) {
      g_sizes.clear();
      for (const char* p = a.c_str() + 8; *p;) {
        g_sizes.push_back(std::max<std::size_t>(4, std::strtoull(p, nullptr, 10) / 4 * 4));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
      g_num_sizes = g_sizes.size();
    } else if (a.rfind("--configs=", 0) == 0) {
      wanted = "," + a.substr(10) + ",";
    } else if (a.rfind("--only=", 0) == 0) {
      only = a.substr(7);
    } else {
      blocks = std::max(1, std::atoi(a.c_str()));
    }
  }
  std::vector<Config> configs = {{"off", Transit::off, 1}, {"auth", Transit::auth, 1}};
  // off2: a second Transit::off communicator, only on request: off2/off is what the ratio
  // of two identical configurations scatters by here (an A/A control for auth/off).
  if (wanted.find(",off2,") != std::string::npos) configs.push_back({"off2", Transit::off, 1});
  for (int t : threads) configs.push_back({"encrypt/" + std::to_string(t) + "t", Transit::encrypt, t});
  if (!wanted.empty())  // --configs=: by name, or "encrypt" for every thread count; the order stays
    std::erase_if(configs, [&](const Config& c) {
      return wanted.find("," + c.name + ",") == std::string::npos && wanted.find("," + c.name.substr(0, c.name.find('/')) + ",") == std::string::npos;
    });
  if (configs.empty() || g_sizes.empty()) {
    std::fprintf(stderr, "bench_transit: --configs= names none of off, auth, encrypt (or encrypt/Nt); --sizes= wants bytes\n");
    return 2;
  }
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("bench_transit: 4 KiB: latency ratios (lower is better); larger: busbw ratios (higher is better);\n"
              "ratios per block against off, median [min-max] over the blocks\n");
  if (only.empty() || only == "idle") condition("the machine as it is", blocks, configs, cores);
  if (only.empty() || only == "busy") {
    BusyLoops hog(cores);
    condition("a busy loop on every online CPU", blocks, configs, cores);
  }
  return 0;
}
