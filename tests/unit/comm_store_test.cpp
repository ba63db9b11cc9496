#include <catch2/catch.hpp>

#include <thread>

#include "common/error.hpp"
#include "saker/comm.hpp"

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
  TcpStoreServer server(0, "127.0.0.1");
  auto a = make_tcp_store("127.0.0.1", server.port(), 2s);
  auto b = make_tcp_store("127.0.0.1", server.port(), 2s);
  std::string binary("x\0y\n", 4);
  std::thread t([&] { std::this_thread::sleep_for(30ms); a->set("k", binary); });
  CHECK(b->get("k", 2s) == binary);
  t.join();
  CHECK_THROWS_WITH(b->get("nobody", 100ms), Catch::Contains("'nobody'") && Catch::Contains("TCP store"));
}

TEST_CASE("TCP store: connecting to nothing fails within the timeout", "[comm][store]") {
  int port;
  { TcpStoreServer probe(0, "127.0.0.1"); port = probe.port(); }
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(make_tcp_store("127.0.0.1", port, 300ms), Catch::Contains("cannot connect"));
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("from_environment explains a missing rendezvous", "[comm][store]") {
  for (const char* v : {"PMI_FD", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SAKER_STORE", "MASTER_ADDR"}) unsetenv(v);
  CHECK_THROWS_WITH(Communicator::from_environment(), Catch::Contains("SAKER_STORE") && Catch::Contains("srun"));
}
