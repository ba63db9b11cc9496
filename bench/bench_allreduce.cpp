// Allreduce busbw (nccl-tests: busbw = algbw * 2(n-1)/n, algbw = bytes / time) of
// libsaker_comm against OpenMPI's MPI_Allreduce and Gloo's ring_chunked, measured
// side by side in this run, for 4 KiB..256 MiB fp32 and np 2..4.
//   one-node: Saker picks /dev/shm; OpenMPI uses its shared-memory BTL.
//   tcp     : every rank a separate "node" (Saker's TCP ring; OpenMPI forced to TCP).
//   Gloo has only its TCP transport on 127.0.0.1 (both modes).
// The machine is shared, so every program reports the median of 7 timed blocks, the
// three programs run interleaved for several rounds, and the table shows the median
// over rounds with the spread (min-max of the rounds' medians).
// Placement is the same for all three: by default the kernel places every rank
// (OpenMPI --bind-to none; its own default binds to cores at np <= 2); with --bind core
// rank r runs on core r (taskset; OpenMPI --bind-to core) while np fits the cores, as
// tasks bound by Slurm would. On a shared machine bound ranks cannot move away from
// other tenants' work, so the default leaves them free.
// Usage: bench_allreduce [--quick] [--rounds R] [--sizes B,B,..] [--modes one-node,tcp]
//                        [--bind core|none]
//   --quick: np=2 only (default np 2..4); --rounds: default 3.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/allreduce_common.hpp"
#include "saker/comm.hpp"

namespace {

using Samples = std::map<std::size_t, std::vector<double>>;  // bytes -> median s/call, one per round

int worker() {
  auto c = saker::comm::Communicator::from_environment();
  bench::measure(
      c->rank(), c->size(),
      [&](std::vector<float>& b) { c->allreduce(b.data(), b.size(), saker::comm::DataType::f32); },
      [&] { c->barrier(); });
  return 0;
}

void run(const std::string& cmd, Samples& into, const char* who) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    std::size_t b;
    double med, lo, hi;
    char word[16];
    if (std::sscanf(line, "%zu %lf %lf %lf", &b, &med, &lo, &hi) == 4) into[b].push_back(med);
    else if (std::sscanf(line, "%zu %15s", &b, word) == 2)
      std::fprintf(stderr, "bench: %s gave a WRONG result at %zu bytes\n", who, b);
  }
  if (pclose(p) != 0) std::fprintf(stderr, "bench: %s failed: %s\n", who, cmd.c_str());
}

// Starts np copies of prog with rank variables; rank 0's stdout is the result.
// bind: rank r on core r.
std::string spawn(const std::string& prog, int np, const std::string& extra_env, bool distinct_nodes, bool bind) {
  std::string n = std::to_string(np);
  return "bash -c 'pids=; for r in $(seq 1 " + std::to_string(np - 1) + "); do SAKER_RANK=$r SAKER_WORLD_SIZE=" + n +
         " " + extra_env + (distinct_nodes ? " SAKER_NODE_ID=n$r" : "") + (bind ? " taskset -c $r " : " ") + prog +
         " >/dev/null & pids=\"$pids $!\"; done; SAKER_RANK=0 SAKER_WORLD_SIZE=" + n + " " + extra_env +
         (distinct_nodes ? " SAKER_NODE_ID=n0" : "") + (bind ? " taskset -c 0 " : " ") + prog +
         "; rc=$?; wait $pids; exit $rc'";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Figure {
  double bw = NAN, lo = NAN, hi = NAN, us = NAN;  // busbw median/min/max, median latency
};

Figure figure(const Samples& s, std::size_t b, int np) {
  Figure f;
  auto it = s.find(b);
  if (it == s.end() || it->second.empty()) return f;
  double k = 2.0 * (np - 1) / np / 1e9 * static_cast<double>(b);
  auto [mn, mx] = std::minmax_element(it->second.begin(), it->second.end());
  f.us = median(it->second) * 1e6;
  f.bw = k / median(it->second);
  f.lo = k / *mx;
  f.hi = k / *mn;
  return f;
}

std::string cell(const Figure& f) {
  char s[64];
  std::snprintf(s, sizeof s, "%6.3f [%5.2f-%5.2f]", f.bw, f.lo, f.hi);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) return worker();
  bool quick = false, bind_core = false;
  int rounds = 3;
  std::vector<std::string> modes{"one-node", "tcp"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sizes" && i + 1 < argc) setenv("BENCH_SIZES", argv[++i], 1);
    else if (a == "--bind" && i + 1 < argc) bind_core = std::strcmp(argv[++i], "core") == 0;
    else if (a == "--modes" && i + 1 < argc) {
      modes.clear();
      std::string m = argv[++i];
      for (std::size_t p = 0; p <= m.size();) {
        std::size_t q = m.find(',', p);
        if (q == std::string::npos) q = m.size();
        modes.push_back(m.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--rounds R] [--sizes B,B,..] [--modes one-node,tcp] [--bind core|none]\n", argv[0]);
      return 2;
    }
  }
  std::string self = argv[0];
  std::string dir = self.substr(0, self.rfind('/') + 1);
  std::printf("allreduce fp32 busbw in GB/s (nccl-tests: algbw*2(n-1)/n); ratio = saker / peer, same run;\n"
              "each figure: median over %d interleaved rounds of each program's median of %d blocks, [min-max] "
              "of the rounds\n", rounds, bench::kBlocks);
  int port = 23000 + getpid() % 20000;
  std::map<std::string, double> at64;  // "mode np=2 peer" -> ratio, for the target summary
  for (const std::string& mode : modes) {
    bool tcp = mode == "tcp";
    for (int np = 2; np <= (quick ? 2 : 4); ++np) {
      Samples saker, mpi, gloo;
      bool bind = bind_core && np <= static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
      for (int r = 0; r < rounds; ++r) {
        std::string env = "SAKER_STORE=127.0.0.1:" + std::to_string(port++) + " SAKER_COMM_TIMEOUT=120";
        run(spawn(self + " --worker", np, env, tcp, bind), saker, "saker");
        // Within the cores OpenMPI keeps its default (busy-polling) progress.
        std::string mca = tcp ? " --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo" : "";
        run("mpirun --allow-run-as-root" + std::string(bind ? " --bind-to core" : " --bind-to none") +
                std::string(np > 2 ? " --oversubscribe" : "") + " -x BENCH_SIZES -np " +
                std::to_string(np) + mca + " " + dir + "bench_allreduce_mpi 2>/dev/null",
            mpi, "openmpi");
        std::string store = "/tmp/saker-bench-gloo-" + std::to_string(getpid()) + "-" + std::to_string(port);
        run("mkdir -p " + store + " && " + spawn(dir + "bench_allreduce_gloo " + store, np, "", false, bind) + "; rm -rf " + store,
            gloo, "gloo");
      }
      std::printf("\n== %s, np=%d, %s%s\n", mode.c_str(), np, bind ? "rank r on core r" : "unbound",
                  np > 2 ? " (oversubscribes the 2 cores: indicative only)" : "");
      std::printf("%10s %21s %21s %21s %6s %6s %9s %9s %9s\n", "bytes", "saker", "openmpi", "gloo", "x mpi", "x gloo",
                  "saker us", "mpi us", "gloo us");
      for (std::size_t b : bench::sizes()) {
        Figure s = figure(saker, b, np), m = figure(mpi, b, np), g = figure(gloo, b, np);
        std::printf("%10zu %21s %21s %21s %6.2f %6.2f %9.1f %9.1f %9.1f\n", b, cell(s).c_str(), cell(m).c_str(),
                    cell(g).c_str(), s.bw / m.bw, s.bw / g.bw, s.us, m.us, g.us);
        if (np == 2 && b == (64u << 20)) {
          at64[mode + " x mpi"] = s.bw / m.bw;
          at64[mode + " x gloo"] = s.bw / g.bw;
        }
        if (np == 2 && b == 4096) at64[mode + " latency/mpi"] = s.us / m.us;
      }
      std::fflush(stdout);
    }
  }
  // The targets (np=2, 64 MiB fp32 busbw; 4 KiB latency).
  struct Target { const char* key; double goal; bool at_most; };
  const Target targets[] = {{"one-node x mpi", 2.0, false}, {"one-node x gloo", 3.0, false},
                            {"tcp x mpi", 1.5, false},      {"tcp x gloo", 1.5, false},
                            {"one-node latency/mpi", 2.0, true}, {"tcp latency/mpi", 2.0, true}};
  std::printf("\ntargets (np=2; 64 MiB busbw ratios, 4 KiB latency ratio):\n");
  for (const Target& t : targets) {
    auto it = at64.find(t.key);
    if (it == at64.end()) continue;
    bool met = t.at_most ? it->second <= t.goal : it->second >= t.goal;
    std::printf("  %-22s %6.2f  goal %s %.1f  %s\n", t.key, it->second, t.at_most ? "<=" : ">=", t.goal,
                met ? "met" : "NOT MET");
  }
  return 0;
}
