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
// The transport's bound (bench_allreduce_bound.hpp) runs in every round beside the three
// programs: Saker's busbw is shown as a fraction of one TCP stream's per-direction rate
// with both directions busy (tcp) or of memcpy bandwidth (one-node). Then an alpha-beta
// model (bench_allreduce_model.hpp) is fitted to Saker's np=2 figures of each mode,
// checked against np=3 and 4, and used to predict 8..1024 nodes.
// --wire NS0=ADDR0,NS1=ADDR1[,...] runs rank r in network namespace NSr ("ADDR0" alone:
// here) at ADDRr, one rank per emulated node, np 2 up to the nodes (4 at most; 2 with
// --quick): bench/wire.sh sets such nodes up on a bridge, each link shaped with tc (see
// saker-comm(3), PERFORMANCE). OpenMPI starts its daemons there through a generated
// rsh agent. On a rate-limited wire the host's cores are no longer the bound, so the
// model's check on 3 and 4 ranks tests its scaling law alone.
// Usage: bench_allreduce [--quick] [--rounds R] [--sizes B,B,..] [--modes one-node,tcp]
//                        [--bind core|none] [--wire [NS0=]ADDR0,NS1=ADDR1,..] [--report FILE]
//                        [--transit auth|encrypt|off]
//   --quick: np=2 only (default np 2..4); --rounds: default 3; --report: also write the
//   model and its predictions to FILE; --transit: Saker's SAKER_COMM_TRANSIT (the peers
//   have no such mode: against them, encrypt shows its whole cost; bench_transit compares
//   the modes and prints the AES-256-GCM bound).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/allreduce_common.hpp"
#include "bench/bench_allreduce_bound.hpp"
#include "bench/bench_allreduce_model.hpp"
#include "common/reserved_port.hpp"
#include "launcher/comm/auth.hpp"
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

// Runs cmd; collects "bytes median min max" lines into into, and "stream"/"memcpy"
// lines (the bound worker's) into bound[word].
void run(const std::string& cmd, Samples& into, const char* who, std::map<std::string, std::vector<double>>* bound = nullptr) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    std::size_t b;
    double med, lo, hi;
    char word[16];
    if (std::sscanf(line, "%zu %lf %lf %lf", &b, &med, &lo, &hi) == 4) into[b].push_back(med);
    else if (bound && std::sscanf(line, "%15s %lf %lf %lf", word, &med, &lo, &hi) == 4) (*bound)[word].push_back(med);
    else if (std::sscanf(line, "%zu %15s", &b, word) == 2)
      std::fprintf(stderr, "bench: %s gave a WRONG result at %zu bytes\n", who, b);
  }
  if (pclose(p) != 0) std::fprintf(stderr, "bench: %s failed: %s\n", who, cmd.c_str());
}

// An emulated wire: rank r runs in network namespace ns[r] ("" = here) at addr[r].
struct Wire {
  std::vector<std::string> ns, addr;
  bool on() const { return !addr.empty(); }
  std::string prefix(int r) const {
    auto i = static_cast<std::size_t>(r);
    return i < ns.size() && !ns[i].empty() ? "ip netns exec " + ns[i] + " " : "";
  }
  std::string at(int r) const { return addr.at(static_cast<std::size_t>(r)); }
};

// Starts np copies of prog with rank variables; rank 0's stdout is the result.
// bind: rank r on core r. env_of(r): extra variables for rank r.
template <class Env>
std::string spawn(const std::string& prog, int np, Env env_of, bool distinct_nodes, bool bind, const Wire& wire) {
  std::string n = std::to_string(np), cmd = "bash -c 'pids=; ";
  auto one = [&](int r) {
    std::string rs = std::to_string(r);
    return "SAKER_RANK=" + rs + " SAKER_WORLD_SIZE=" + n + " " + env_of(r) + (distinct_nodes ? " SAKER_NODE_ID=n" + rs : "") +
           " " + wire.prefix(r) + (bind ? "taskset -c " + rs + " " : "") + prog;
  };
  for (int r = 1; r < np; ++r) cmd += one(r) + " >/dev/null & pids=\"$pids $!\"; ";
  return cmd + one(0) + "; rc=$?; wait $pids; exit $rc'";
}

// The first np nodes' addresses, comma-separated (mpirun --host).
std::string hosts(const Wire& wire, int np) {
  std::string h;
  for (int r = 0; r < np; ++r) h += (r ? "," : "") + wire.at(r);
  return h;
}

// OpenMPI's rsh agent for --wire: "agent [options] host command..." runs the command
// (its daemon) in the namespace that holds host's address.
std::string write_mpi_agent(const Wire& wire) {
  std::string path = "/tmp/saker-bench-agent-" + std::to_string(getpid()) + ".sh";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return "";
  std::fprintf(f, "#!/bin/bash\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\nhost=$1; shift\ncase $host in\n");
  for (std::size_t r = 0; r < wire.addr.size(); ++r)
    if (!wire.ns[r].empty()) std::fprintf(f, "  %s) exec ip netns exec %s /bin/sh -c \"$*\";;\n", wire.addr[r].c_str(), wire.ns[r].c_str());
  std::fprintf(f, "esac\necho \"no namespace for $host\" >&2; exit 1\n");
  std::fclose(f);
  chmod(path.c_str(), 0755);
  return path;
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

Figure spread(const std::vector<double>& v) {
  Figure f;
  if (v.empty()) return f;
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  f.bw = median(v);
  f.lo = *mn;
  f.hi = *mx;
  return f;
}

std::string cell(const Figure& f) {
  char s[64];
  std::snprintf(s, sizeof s, "%6.3f [%5.2f-%5.2f]", f.bw, f.lo, f.hi);
  return s;
}

std::string human(double bytes) {
  char s[32];
  if (bytes >= (1u << 20)) std::snprintf(s, sizeof s, "%g MiB", bytes / (1u << 20));
  else std::snprintf(s, sizeof s, "%g KiB", bytes / 1024);
  return s;
}

// Per mode: np -> Saker's per-call times (median over rounds) for the model.
using Measured = std::map<int, std::map<std::size_t, double>>;

// Fits the model to np=2, prints how well it predicts np=3..4 (local "nodes" that share
// `cores` cores) and what it predicts for 8..1024 nodes.
void model_report(FILE* out, const std::map<std::string, Measured>& measured, const std::map<std::string, double>& stream_gbs,
                  int cores, bool wire) {
  using namespace bench::model;
  std::map<std::string, PerSize> fits;
  std::fprintf(out, "\nalpha-beta model: t(P ranks, N bytes) = 2(P-1) alpha + 2(P-1)/P N beta(N) (ring); alpha and beta(N)"
                    " from Saker's np=2 medians,\nchecked against np=3..4 (cores split: bandwidth term x max(1, P/%d cores);"
                    " share kept: no stretch; [sizes] the direct/exchange algorithms may serve)\n", cores);
  for (const auto& [mode, by_np] : measured) {
    auto two = by_np.find(2);
    if (two == by_np.end()) continue;
    std::map<double, double> t2;
    for (auto [b, t] : two->second) t2[static_cast<double>(b)] = t;
    PerSize m = fit_per_size(t2);
    if (!m.ok()) continue;
    fits[mode] = m;
    std::fprintf(out, "  %-9s alpha %7.2f us; beta(N) in ns/B:", mode.c_str(), m.alpha * 1e6);
    for (auto [b, v] : m.beta) std::fprintf(out, " %s %.3f", human(b).c_str(), v * 1e9);
    std::fprintf(out, "\n");
    for (const auto& [np, times] : by_np) {
      if (np == 2) continue;
      // Up to 1 MiB Saker may take its direct or exchange algorithm (calibrated per
      // run) instead of the ring: those sizes are shown in brackets and left out of the
      // verdict, which is about the ring model. Two views of the local "nodes": they
      // split this machine's cores (bandwidth term x P/cores), or, on a machine already
      // busy with other work, each rank keeps the CPU share it had (no stretch).
      for (int shared = 1; shared >= 0; --shared) {
        if (mode == "one-node" && !shared) continue;
        if (wire && shared) continue;  // the wire is the bound, not the cores
        std::fprintf(out, "    np=%d error, %s:", np, mode == "one-node" ? "one node" : shared ? "cores split" : wire ? "link-bound" : "share kept");
        double worst = 0;
        for (auto [b, t] : times) {
          double n = static_cast<double>(b);
          double pred = ring_local(m.at(n), np, n, mode == "one-node" || !shared ? 1 << 20 : cores);
          double err = (pred - t) / t;
          bool ring_only = mode != "tcp" || b > (1u << 20);
          if (ring_only) worst = std::max(worst, std::fabs(err));
          std::fprintf(out, ring_only ? " %s %+.0f%%" : " [%s %+.0f%%]", human(n).c_str(), err * 100);
        }
        std::fprintf(out, "  | worst %.0f%% %s\n", worst * 100, worst <= 0.25 ? "(within 25%)" : "(NOT within 25%)");
      }
    }
  }
  if (!fits.count("tcp")) return;
  // Cluster predictions: the fitted TCP link, and the same link with the bound's stream
  // rate replaced by an emulated 10/25 Gb/s wire plus 20 us one-way latency.
  // A wire's link: the fitted software latency plus 20 us, and the wire's rate (a
  // cluster node's host is assumed faster than its wire; this one's is not).
  std::vector<std::pair<std::string, PerSize>> links{{"this machine's TCP (fitted)", fits["tcp"]}};
  for (double gbit : {10.0, 25.0, 100.0}) {
    PerSize w;
    w.alpha = fits["tcp"].alpha + 20e-6;
    w.beta[1] = 8.0 / (gbit * 1e9);
    char name[64];
    std::snprintf(name, sizeof name, "%g Gb/s wire, +20 us", gbit);
    links.emplace_back(name, w);
  }
  (void)stream_gbs;
  bool have_shm = fits.count("one-node") > 0;
  const int kLocal = 2;  // ranks per node for the hierarchical and flat cases
  std::fprintf(out, "\npredicted allreduce time in ms (one rank per node: ring, halving/doubling, tree; %d ranks per node:"
                    " flat ring over all ranks vs hierarchical%s)\n", kLocal, have_shm ? "" : " [no one-node fit: skipped]");
  for (const auto& [name, link] : links) {
    std::fprintf(out, "  link: %s (alpha %.1f us, %.2f GB/s at 64 MiB)\n", name.c_str(), link.alpha * 1e6,
                 1e-9 / link.at(64.0 * (1 << 20)).beta);
    std::fprintf(out, "  %9s %6s %10s %10s %10s %12s %12s  best(1/node)\n", "bytes", "nodes", "ring", "halv/doub", "tree",
                 "flat ring x2", "hier x2");
    for (double n : {64.0 * 1024, 4.0 * (1 << 20), 64.0 * (1 << 20)})
      for (int p : {8, 16, 64, 256, 1024}) {
        Fit f = link.at(n);
        double r = ring(f, p, n), h = halving_doubling(f, p, n), t = tree(f, p, n);
        double flat = ring(f, p * kLocal, n), hier = have_shm ? hierarchical(f, fits["one-node"].at(n), p, kLocal, n) : NAN;
        const char* best = r <= h && r <= t ? "ring" : h <= t ? "halving/doubling" : "tree";
        std::fprintf(out, "  %9s %6d %10.3f %10.3f %10.3f %12.3f %12.3f  %s\n", human(n).c_str(), p, r * 1e3, h * 1e3,
                     t * 1e3, flat * 1e3, hier * 1e3, best);
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) return worker();
  if (argc > 1 && std::strcmp(argv[1], "--worker-bound") == 0) return bench::bound_worker();
  // The ranks prove a job key to each other (saker-comm(3), AUTHENTICATION): one per run,
  // inherited through the environment, never on a command line.
  if (!std::getenv("SAKER_JOB_KEY")) setenv("SAKER_JOB_KEY", saker::comm::auth::JobKey::generate().hex().c_str(), 1);
  bool quick = false, bind_core = false;
  int rounds = 3;
  std::string report;
  Wire wire;
  std::vector<std::string> modes{"one-node", "tcp"};
  auto split = [](const std::string& m) {
    std::vector<std::string> v;
    for (std::size_t p = 0; p <= m.size();) {
      std::size_t q = m.find(',', p);
      if (q == std::string::npos) q = m.size();
      v.push_back(m.substr(p, q - p));
      p = q + 1;
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sizes" && i + 1 < argc) setenv("BENCH_SIZES", argv[++i], 1);
    else if (a == "--bind" && i + 1 < argc) bind_core = std::strcmp(argv[++i], "core") == 0;
    else if (a == "--modes" && i + 1 < argc) modes = split(argv[++i]);
    else if (a == "--report" && i + 1 < argc) report = argv[++i];
    else if (a == "--transit" && i + 1 < argc) setenv("SAKER_COMM_TRANSIT", argv[++i], 1);  // the ranks inherit it
    else if (a == "--wire" && i + 1 < argc) {
      for (const std::string& w : split(argv[++i])) {
        auto eq = w.find('=');
        wire.ns.push_back(eq == std::string::npos ? "" : w.substr(0, eq));
        wire.addr.push_back(eq == std::string::npos ? w : w.substr(eq + 1));
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--rounds R] [--sizes B,B,..] [--modes one-node,tcp] [--bind core|none]"
                           " [--wire [NS0=]ADDR0,NS1=ADDR1,..] [--report FILE] [--transit auth|encrypt|off]\n", argv[0]);
      return 2;
    }
  }
  int max_np = quick ? 2 : 4;
  if (wire.on()) {
    modes = {"tcp"};
    if (wire.addr.size() < 2 || wire.addr.size() > 8) {
      std::fprintf(stderr, "bench: --wire takes 2 to 8 nodes, [NS0=]ADDR0,NS1=ADDR1,... (bench/wire.sh up prints it)\n");
      return 2;
    }
    max_np = std::min<int>(max_np, static_cast<int>(wire.addr.size()));  // one rank per emulated node
  }
  std::string self = argv[0];
  std::string dir = self.substr(0, self.rfind('/') + 1);
  int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("allreduce fp32 busbw in GB/s (nccl-tests: algbw*2(n-1)/n); ratio = saker / peer, same run;\n"
              "each figure: median over %d interleaved rounds of each program's median of %d blocks, [min-max] "
              "of the rounds; Saker's transit: %s\n", rounds, bench::kBlocks,
              std::getenv("SAKER_COMM_TRANSIT") ? std::getenv("SAKER_COMM_TRANSIT") : "auth");
  for (std::size_t r = 0; wire.on() && r < wire.addr.size(); ++r)
    std::printf("emulated wire: rank %zu at %s%s%s\n", r, wire.addr[r].c_str(), wire.ns[r].empty() ? "" : " in netns ",
                wire.ns[r].c_str());
  int port = 23000 + getpid() % 20000;
  std::string agent = wire.on() ? write_mpi_agent(wire) : "";
  std::map<std::string, double> at64;  // "mode np=2 peer" -> ratio, for the target summary
  std::map<std::string, Measured> measured;
  std::map<std::string, double> stream_gbs;
  for (const std::string& mode : modes) {
    bool tcp = mode == "tcp";
    std::map<std::string, std::vector<double>> bound;  // "stream"/"memcpy" -> GB/s per round (np=2 blocks)
    for (int np = 2; np <= max_np; ++np) {
      Samples saker, mpi, gloo;
      bool bind = bind_core && np <= cores;
      for (int r = 0; r < rounds; ++r) {
        std::string store = wire.on() ? wire.at(0) : "127.0.0.1";
        // A store inside a namespace: a port below the ephemeral range (nothing else
        // listens there). Here the kernel picks a free one, held until the ranks are done
        // so that none of the many connections these programs open is given it first.
        std::optional<saker::ReservedPort> held;
        if (!wire.on() || wire.ns[0].empty()) held.emplace(0, store);
        std::string sport = std::to_string(held ? held->port() : 20000 + port++ % 12000);
        auto saker_env = [&](int rank) {
          return "SAKER_STORE=" + store + ":" + sport + " SAKER_COMM_TIMEOUT=120" +
                 (wire.on() ? " SAKER_COMM_ADDR=" + wire.at(rank) : "");
        };
        run(spawn(self + " --worker", np, saker_env, tcp, bind, wire), saker, "saker");
        // Within the cores OpenMPI keeps its default (busy-polling) progress.
        std::string mca = tcp ? " --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include " +
                                    (wire.on() ? wire.at(0).substr(0, wire.at(0).rfind('.')) + ".0/24" : std::string("lo"))
                              : "";
        if (wire.on())
          mca += " --host " + hosts(wire, np) + " --mca plm_rsh_agent " + agent + " --mca oob_tcp_if_include " +
                 wire.at(0).substr(0, wire.at(0).rfind('.')) + ".0/24 --mca orte_keep_fqdn_hostnames 1";
        run("mpirun --allow-run-as-root" + std::string(bind ? " --bind-to core" : " --bind-to none") +
                std::string(np > 2 ? " --oversubscribe" : "") + " -x BENCH_SIZES -np " +
                std::to_string(np) + mca + " " + dir + "bench_allreduce_mpi 2>/dev/null",
            mpi, "openmpi");
        std::string fstore = "/tmp/saker-bench-gloo-" + std::to_string(getpid()) + "-" + std::to_string(port++);
        auto gloo_env = [&](int rank) { return wire.on() ? "BENCH_GLOO_ADDR=" + wire.at(rank) : std::string(); };
        run("mkdir -p " + fstore + " && " + spawn(dir + "bench_allreduce_gloo " + fstore, np, gloo_env, false, bind, wire) +
                "; rm -rf " + fstore, gloo, "gloo");
        if (np == 2) {  // the bound, in the same round
          std::string pf = "/tmp/saker-bench-bound-" + std::to_string(getpid()) + "-" + std::to_string(r);
          auto bound_env = [&](int rank) {
            return "BOUND_RANK=" + std::to_string(rank) + " BOUND_PORTFILE=" + pf + (wire.on() ? " BOUND_ADDR=" + wire.at(0) : "");
          };
          Samples none;
          unlink(pf.c_str());
          run(spawn(self + " --worker-bound", 2, bound_env, false, bind, wire), none, "bound", &bound);
          unlink(pf.c_str());
        }
      }
      Figure st = spread(bound["stream"]), mc = spread(bound["memcpy"]);
      double ref = tcp ? st.bw : mc.bw;
      std::printf("\n== %s, np=%d, %s%s\n", mode.c_str(), np, bind ? "rank r on core r" : "unbound",
                  np > cores && !wire.on() ? (" (oversubscribes the " + std::to_string(cores) + " cores: indicative only)").c_str() : "");
      std::printf("bound (measured in the np=2 rounds): one TCP stream per direction, both directions at once %s GB/s;"
                  " memcpy %s GB/s (both ranks copying)\n", cell(st).c_str(), cell(mc).c_str());
      std::printf("%10s %21s %21s %21s %6s %6s %7s %9s %9s %9s\n", "bytes", "saker", "openmpi", "gloo", "x mpi", "x gloo",
                  tcp ? "x strm" : "x mcpy", "saker us", "mpi us", "gloo us");
      for (std::size_t b : bench::sizes()) {
        Figure s = figure(saker, b, np), m = figure(mpi, b, np), g = figure(gloo, b, np);
        std::printf("%10zu %21s %21s %21s %6.2f %6.2f %7.2f %9.1f %9.1f %9.1f\n", b, cell(s).c_str(), cell(m).c_str(),
                    cell(g).c_str(), s.bw / m.bw, s.bw / g.bw, s.bw / ref, s.us, m.us, g.us);
        if (std::isfinite(s.us)) measured[mode][np][b] = s.us * 1e-6;
        if (np == 2 && b == (64u << 20)) {
          at64[mode + " x mpi"] = s.bw / m.bw;
          at64[mode + " x gloo"] = s.bw / g.bw;
          if (tcp) at64["tcp x stream bound"] = s.bw / st.bw;
        }
        if (np == 2 && b == 4096) at64[mode + " latency/mpi"] = s.us / m.us;
        if (np == 2 && tcp && b >= (1u << 20) && b <= (16u << 20)) {  // the worst mid-size ratio
          auto [it, fresh] = at64.emplace("tcp 1-16 MiB x mpi (worst)", s.bw / m.bw);
          if (!fresh) it->second = std::min(it->second, s.bw / m.bw);
        }
      }
      if (tcp) stream_gbs[mode] = st.bw;
      std::fflush(stdout);
    }
  }
  if (!agent.empty()) unlink(agent.c_str());
  // The targets (np=2; 64 MiB fp32 busbw; 4 KiB latency).
  struct Target { const char* key; double goal; bool at_most; };
  const Target loopback[] = {{"one-node x mpi", 2.0, false}, {"one-node x gloo", 3.0, false},
                             {"tcp x mpi", 1.5, false},      {"tcp x gloo", 1.5, false},
                             {"tcp x stream bound", 0.6, false}, {"tcp 1-16 MiB x mpi (worst)", 1.0, false},
                             {"one-node latency/mpi", 2.0, true}, {"tcp latency/mpi", 2.0, true}};
  // On a shaped wire the wire is the bound: every library that keeps it busy ties with
  // the others, so the target is the share of the link (its one-stream rate, measured).
  const Target on_wire[] = {{"tcp x stream bound", 0.8, false}};
  std::printf("\ntargets (np=2; 64 MiB busbw ratios unless named, 4 KiB latency ratio%s):\n",
              wire.on() ? "; on the wire: busbw / the link's measured one-stream rate" : "");
  for (const Target& t : wire.on() ? std::vector<Target>(std::begin(on_wire), std::end(on_wire))
                                   : std::vector<Target>(std::begin(loopback), std::end(loopback))) {
    auto it = at64.find(t.key);
    if (it == at64.end()) continue;
    bool met = t.at_most ? it->second <= t.goal : it->second >= t.goal;
    std::printf("  %-27s %6.2f  goal %s %.1f  %s\n", t.key, it->second, t.at_most ? "<=" : ">=", t.goal,
                met ? "met" : "NOT MET");
  }
  model_report(stdout, measured, stream_gbs, cores, wire.on());
  if (!report.empty()) {
    if (FILE* f = std::fopen(report.c_str(), "w")) {
      model_report(f, measured, stream_gbs, cores, wire.on());
      std::fclose(f);
    } else {
      std::fprintf(stderr, "bench: cannot write the report %s: %s\n", report.c_str(), std::strerror(errno));
    }
  }
  return 0;
}
