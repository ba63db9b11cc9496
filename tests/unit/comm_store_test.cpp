#include <catch2/catch.hpp>

#include <climits>
#include <set>
#include <thread>

#include "common/error.hpp"
#include "launcher/comm/slurm_store_port.hpp"
#include "saker/comm.hpp"
#include "tests/unit/comm_test_support.hpp"

using namespace saker::comm;
using namespace std::chrono_literals;

TEST_CASE("memory store: get waits for set and times out naming the key", "[comm][store]") {
  auto s = make_memory_store();
  std::thread t([&] { std::this_thread::sleep_for(20ms); s->set("a", "1"); });
  CHECK(s->get("a", 2s) == "1");
  t.join();
  CHECK_THROWS_WITH(s->get("missing", 50ms), Catch::Contains("'missing'") && Catch::Contains("within 50 ms"));
}

TEST_CASE("TCP store: values of any bytes, waiting gets, timeouts", "[comm][store]") {
  Options o = test::quick_options();
  o.timeout = 2s;
  TcpStoreServer server(0, o, "127.0.0.1");
  auto a = make_tcp_store("127.0.0.1", server.port(), o);
  auto b = make_tcp_store("127.0.0.1", server.port(), o);
  std::string binary("x\0y\n", 4);
  std::thread t([&] { std::this_thread::sleep_for(30ms); a->set("k", binary); });
  CHECK(b->get("k", 2s) == binary);
  t.join();
  CHECK_THROWS_WITH(b->get("nobody", 100ms), Catch::Contains("'nobody'") && Catch::Contains("TCP store"));
}

TEST_CASE("TCP store: connecting to nothing fails within the timeout", "[comm][store]") {
  int port;
  Options o = test::quick_options();
  o.timeout = 300ms;
  { TcpStoreServer probe(0, o, "127.0.0.1"); port = probe.port(); }
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(make_tcp_store("127.0.0.1", port, o), Catch::Contains("cannot connect"));
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("from_environment explains a missing rendezvous", "[comm][store]") {
  for (const char* v : {"PMI_FD", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SAKER_STORE", "MASTER_ADDR"}) unsetenv(v);
  CHECK_THROWS_WITH(Communicator::from_environment(), Catch::Contains("SAKER_STORE") && Catch::Contains("srun"));
}

// Under plain srun every rank derives the store's port from the job and step ids. It must
// stay below Linux's default ephemeral range (32768-60999), where any socket on the node
// may hold the port when rank 0 binds it; ids at the edges of their types included.
TEST_CASE("the Slurm store port stays in 20000-31999 for every job and step id", "[comm][store]") {
  std::set<int> steps_of_one_job;
  for (long step = 0; step < 64; ++step) steps_of_one_job.insert(slurm_store_port(4242, step));
  CHECK(steps_of_one_job.size() == 64);  // a job's concurrent steps never share a store
  for (long job : {0L, 1L, 374L, 375L, 11999L, 12000L, 4294967294L, 67108863L, 2147483647L, -1L, LONG_MAX, LONG_MIN})
    for (long step : {0L, 1L, 63L, 64L, 4294967294L, 4294967295L, -1L, -2L, LONG_MAX}) {
      INFO("job " << job << " step " << step);
      const int port = slurm_store_port(job, step);
      CHECK(port >= 20000);
      CHECK(port < 32000);
    }
  CHECK(slurm_store_port(1000, 0) == 20000 + (1000 * 64) % 12000);  // the documented formula
}
