// Failure detection with real processes: ranks are forked children rendezvousing
// over a TCP store served by the test; one is killed (or stopped) mid-allreduce. Over the
// TCP ring (a node each), and on one node through /dev/shm with 4 stripes, where every
// one of a rank's threads is waiting on the victim when it goes. The killed victim stays a
// zombie until the test reaps it, last, as under a launcher busy elsewhere: the shm path
// must see it gone all the same (kill(pid, 0) still succeeds on a zombie).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "saker/comm.hpp"

using namespace saker::comm;
using namespace std::chrono_literals;

namespace {

// Returns each rank's outcome line ("ok", "error: ..."), read from files the children write.
std::vector<std::string> run_processes(int n, int victim, int signal, std::chrono::milliseconds timeout,
                                       double* seconds, bool shm_stripes = false) {
  Options server_options;
  server_options.job_key = std::string(32, '\x5a');
  TcpStoreServer server(0, server_options, "127.0.0.1");
  std::string dir = "/tmp/saker-comm-fault-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string outcome = "ok";
      try {
        Options o;
        o.timeout = timeout;
        o.fusion = false;
        o.ignore_environment = true;
        o.job_key = server_options.job_key;
        o.transport = shm_stripes ? Transport::shm : Transport::ring;
        if (shm_stripes) setenv("SAKER_COMM_SHM_STRIPES", "4", 1);  // this child only
        Placement p{r, n, shm_stripes ? "node0" : "node" + std::to_string(r), "host" + std::to_string(r), -1};
        auto c = Communicator::create(make_tcp_store("127.0.0.1", server.port(), o), p, o);
        std::vector<float> buf(4u << 20, 1.0f);
        if (r == victim)
          std::thread([signal] { std::this_thread::sleep_for(300ms); kill(getpid(), signal); }).detach();
        for (int i = 0; i < 1000000; ++i) c->allreduce(buf.data(), buf.size(), DataType::f32);
      } catch (const std::exception& e) {
        outcome = std::string("error: ") + e.what();
      }
      std::ofstream(dir + "/" + std::to_string(r)) << outcome;
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> outcomes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    waitpid(pids[static_cast<std::size_t>(r)], nullptr, 0);
    std::ifstream in(dir + "/" + std::to_string(r));
    std::stringstream ss;
    ss << in.rdbuf();
    outcomes[static_cast<std::size_t>(r)] = ss.str();
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
  waitpid(pids[static_cast<std::size_t>(victim)], nullptr, 0);
  for (int r = 0; r < n; ++r) unlink((dir + "/" + std::to_string(r)).c_str());
  rmdir(dir.c_str());
  return outcomes;
}

}  // namespace

TEST_CASE("a rank killed mid-allreduce is named by every other rank", "[comm][failure]") {
  for (bool shm : {false, true}) {
    INFO((shm ? "one node, shm, 4 stripes" : "TCP ring"));
    double seconds = 0;
    auto outcomes = run_processes(4, 2, SIGKILL, 5s, &seconds, shm);
    for (int r : {0, 1, 3}) {
      INFO("rank " << r << ": " << outcomes[static_cast<std::size_t>(r)]);
      CHECK_THAT(outcomes[static_cast<std::size_t>(r)], Catch::StartsWith("error:") && Catch::Contains("rank 2 (host host2)"));
    }
    CHECK(seconds < 5.0);  // a dead peer is seen at once, well within the timeout
  }
}

TEST_CASE("a hung (stopped) rank is detected within the timeout", "[comm][failure]") {
  for (bool shm : {false, true}) {
    INFO((shm ? "one node, shm, 4 stripes" : "TCP ring"));
    double seconds = 0;
    auto outcomes = run_processes(3, 1, SIGSTOP, 1500ms, &seconds, shm);
    for (int r : {0, 2}) {
      INFO("rank " << r << ": " << outcomes[static_cast<std::size_t>(r)]);
      CHECK_THAT(outcomes[static_cast<std::size_t>(r)], Catch::Contains("rank 1 (host host1)") && Catch::Contains("did not answer"));
    }
    CHECK(seconds < 8.0);
  }
}
