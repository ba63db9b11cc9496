// Allreduce busbw (nccl-tests: busbw = algbw * 2(n-1)/n, algbw = bytes / time) of
// libsaker_comm against OpenMPI's MPI_Allreduce and Gloo's ring_chunked, measured
// side by side in this run, for 4 KiB..256 MiB fp32 and np 2..4.
//   one node : Saker picks /dev/shm; OpenMPI uses its shared-memory BTL.
//   tcp      : every rank a separate "node" (Saker's TCP ring; OpenMPI forced to TCP).
// Usage: bench_allreduce [--quick]   (--quick: np=2 only)
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "bench/allreduce_common.hpp"
#include "saker/comm.hpp"

using Results = std::map<std::size_t, double>;  // bytes -> seconds per call

static int worker() {
  auto c = saker::comm::Communicator::from_environment();
  for (std::size_t bytes : bench::sizes()) {
    std::vector<float> buf(bytes / 4, 1.0f);
    int iters = bench::iterations(bytes);
    for (int i = 0; i < 2; ++i) c->allreduce(buf.data(), buf.size(), saker::comm::DataType::f32);
    c->barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) c->allreduce(buf.data(), buf.size(), saker::comm::DataType::f32);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    if (c->rank() == 0) std::printf("%zu %.9f\n", bytes, t);
  }
  return 0;
}

static Results run(const std::string& cmd) {
  Results r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::size_t b;
  double t;
  while (std::fscanf(p, "%zu %lf", &b, &t) == 2) r[b] = t;
  if (pclose(p) != 0) std::fprintf(stderr, "bench: command failed: %s\n", cmd.c_str());
  return r;
}

// Starts np copies of prog with rank variables; rank 0's stdout is the result.
static std::string spawn(const std::string& prog, int np, const std::string& extra_env, bool distinct_nodes) {
  std::string s = "bash -c 'pids=; for r in $(seq 1 " + std::to_string(np - 1) + "); do SAKER_RANK=$r SAKER_WORLD_SIZE=" +
                  std::to_string(np) + " " + extra_env + (distinct_nodes ? " SAKER_NODE_ID=n$r" : "") + " " + prog +
                  " >/dev/null & pids=\"$pids $!\"; done; SAKER_RANK=0 SAKER_WORLD_SIZE=" + std::to_string(np) + " " +
                  extra_env + (distinct_nodes ? " SAKER_NODE_ID=n0" : "") + " " + prog + "; rc=$?; wait $pids; exit $rc'";
  return s;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) return worker();
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::string self = argv[0];
  std::string dir = self.substr(0, self.rfind('/') + 1);
  std::printf("allreduce fp32 busbw in GB/s (nccl-tests: algbw*2(n-1)/n); ratio = saker / peer; same run\n");
  int port = 23000 + getpid() % 20000;
  for (const char* mode : {"one-node", "tcp"}) {
    bool tcp = std::strcmp(mode, "tcp") == 0;
    for (int np = 2; np <= (quick ? 2 : 4); ++np) {
      std::string env = "SAKER_STORE=127.0.0.1:" + std::to_string(port++) + " SAKER_COMM_TIMEOUT=120";
      Results saker = run(spawn(self + " --worker", np, env, tcp));
      std::string mca = tcp ? " --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo" : "";
      Results mpi = run("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + mca + " " + dir +
                        "bench_allreduce_mpi 2>/dev/null");
      std::string store = "/tmp/saker-bench-gloo-" + std::to_string(getpid()) + "-" + std::to_string(port);
      Results gloo = run("mkdir -p " + store + " && " + spawn(dir + "bench_allreduce_gloo " + store, np, "", false) +
                         "; rm -rf " + store);
      double f = 2.0 * (np - 1) / np;
      std::printf("\n== %s, np=%d%s\n", mode, np, np > 2 ? " (oversubscribes the 2 cores: indicative only)" : "");
      std::printf("%10s %10s %10s %10s %8s %8s %11s %11s\n", "bytes", "saker", "openmpi", "gloo", "x mpi", "x gloo",
                  "saker us", "mpi us");
      for (std::size_t b : bench::sizes()) {
        auto bw = [&](Results& r) { return r.count(b) ? b / r[b] * f / 1e9 : NAN; };
        double s = bw(saker), m = bw(mpi), g = bw(gloo);
        std::printf("%10zu %10.3f %10.3f %10.3f %8.2f %8.2f %11.1f %11.1f\n", b, s, m, g, s / m, s / g,
                    saker.count(b) ? saker[b] * 1e6 : NAN, mpi.count(b) ? mpi[b] * 1e6 : NAN);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
