// Another user on the node against a running job (issue 28): read or poison the store,
// inject an abort, hijack a link, or send lengths that size allocations. Each attack
// must change nothing the job shows: results bitwise correct, no attacker text anywhere.
//
// Compiled with -DSAKER_TEST_OLD_API against the code before the job key (72e3878), these
// tests fail there; that is how they were checked (see the commit message).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "comm_flood_support.hpp"
#include "comm_test_support.hpp"
#include "launcher/comm/net.hpp"
#ifndef SAKER_TEST_OLD_API
#include "launcher/comm/auth.hpp"
#include "launcher/comm/fusion.hpp"
#include "comm_mesh_support.hpp"
#include "launcher/comm/mesh.hpp"
#endif

using namespace saker::comm;
using namespace std::chrono_literals;

namespace {

const std::string kAttackerText = "ATTACKER-TEXT-f00d";

std::unique_ptr<TcpStoreServer> serve_store(const Options& o) {
#ifdef SAKER_TEST_OLD_API
  (void)o;
  return std::make_unique<TcpStoreServer>(0, "127.0.0.1");
#else
  return std::make_unique<TcpStoreServer>(0, o, "127.0.0.1");
#endif
}

std::shared_ptr<Store> store_client(int port, const Options& o) {
#ifdef SAKER_TEST_OLD_API
  return make_tcp_store("127.0.0.1", port, o.timeout);
#else
  return make_tcp_store("127.0.0.1", port, o);
#endif
}

void put_u32(std::string& s, std::uint32_t v) { s.append(reinterpret_cast<char*>(&v), 4); }

std::string store_request(char op, const std::string& key, const std::string* value = nullptr) {
  std::string m(1, op);
  put_u32(m, static_cast<std::uint32_t>(key.size()));
  m += key;
  if (value) {
    put_u32(m, static_cast<std::uint32_t>(value->size()));
    m += *value;
  }
  return m;
}

// The attacker: a plain connection that says what it likes.
saker::comm::net::Fd attacker_connect(const std::string& host, int port) {
  return net::connect_to(host, port, net::deadline_in(5s), "the attacked port");
}
void say(int fd, const std::string& bytes) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {}
}
// Everything the victim sends back until it hangs up or `within` passes.
std::string hear(int fd, std::chrono::milliseconds within) {
  std::string got;
  auto d = net::deadline_in(within);
  while (net::Clock::now() < d) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, net::poll_ms(d)) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

// The old mesh greeting: magic, kind (1 link, 2 abort, 3 ping), from, channel, text_len.
std::string old_hello(std::uint32_t kind, std::int32_t from, std::int32_t channel, std::uint32_t text_len) {
  std::string h;
  put_u32(h, 0x53414b52);
  put_u32(h, kind);
  put_u32(h, static_cast<std::uint32_t>(from));
  put_u32(h, static_cast<std::uint32_t>(channel));
  put_u32(h, text_len);
  return h;
}

// Log lines, to prove the attacker's text reaches none.
std::mutex log_mu;
std::string log_lines;
void capture(saker::log::Level, const char* line) {
  std::lock_guard lock(log_mu);
  log_lines += line;
  log_lines += '\n';
}

// Per-rank values whose float sum is exact, so the result is checked bit for bit.
std::vector<float> pattern(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) * 0.5f + static_cast<float>(rank);
  return v;
}
bool summed(const std::vector<float>& v, int ranks) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    float want = static_cast<float>(i % 7) * 0.5f * static_cast<float>(ranks) + static_cast<float>(ranks * (ranks - 1) / 2);
    if (std::memcmp(&v[i], &want, sizeof want) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("store: a stranger can neither read nor poison it, and the job still runs", "[comm][intruder]") {
  Options o = test::quick_options();
  auto server = serve_store(o);
  auto first = store_client(server->port(), o);
  first->set("saker/secret", "rank-address-1234");
  // Read: ask for the key, as the old protocol allowed anyone to.
  auto reader = attacker_connect("127.0.0.1", server->port());
  say(reader.get(), store_request('G', "saker/secret"));
  CHECK(hear(reader.get(), 1500ms).find("rank-address-1234") == std::string::npos);
  // Poison: overwrite it, padded past a handshake's first message.
  auto poisoner = attacker_connect("127.0.0.1", server->port());
  std::string evil = "attacker-address";
  say(poisoner.get(), store_request('S', "saker/secret", &evil) + std::string(64, '\0'));
  hear(poisoner.get(), 1500ms);
  CHECK(store_client(server->port(), o)->get("saker/secret", 2s) == "rank-address-1234");
  // A silent stranger stays connected while a two-rank job rendezvouses and reduces.
  auto silent = attacker_connect("127.0.0.1", server->port());
  test::Failures failures;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto c = Communicator::create(store_client(server->port(), o), Placement{r, 2, "node" + std::to_string(r), "h", -1}, o);
        auto v = pattern(r, 100'003);
        c->allreduce(v.data(), v.size(), DataType::f32);
        if (!summed(v, 2)) failures.add("rank " + std::to_string(r) + ": wrong sum");
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    });
  for (auto& t : ranks) t.join();
  CHECK(failures.text() == "");
}

TEST_CASE("store: oversized keys and values are refused before they size anything", "[comm][intruder]") {
  Options o = test::quick_options();
  auto server = serve_store(o);
  auto client = store_client(server->port(), o);
  CHECK_THROWS_WITH(client->set(std::string(5000, 'k'), "v"), Catch::Contains("too long"));
  CHECK_THROWS_WITH(client->set("k", std::string(2u << 20, 'v')), Catch::Contains("too long"));
  CHECK_THROWS_WITH(client->get(std::string(5000, 'k'), 1s), Catch::Contains("too long"));
  // A fake store (it holds the key: a bug, not a stranger) answers with a 4 GiB length.
  int port = 0;
  net::Fd listener = net::listen_on("127.0.0.1", 0, &port);
  std::thread fake([&] {
    net::Fd fd = net::accept_until(listener.get(), net::deadline_in(5s));
    if (!fd) return;
    try {
#ifndef SAKER_TEST_OLD_API
      auth::Context ctx{auth::JobKey::from_raw(o.job_key), auth::job_scope()};
      auth::accept_handshake(fd.get(), ctx, -1, 1, [](auth::Kind k) { return k == auth::Kind::store; },
                             net::deadline_in(5s), "test");
#endif
      char req[64];
      recv(fd.get(), req, sizeof req, 0);
      std::uint32_t huge = 0xfffffff0u;
      say(fd.get(), std::string(reinterpret_cast<char*>(&huge), 4));
      hear(fd.get(), 3s);
    } catch (const std::exception&) {
    }
  });
  auto victim = store_client(port, o);
  try {
    victim->get("k", 2s);
    FAIL("a 4 GiB answer was accepted");
  } catch (const saker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("too long") && Catch::Contains("127.0.0.1:" + std::to_string(port)));
  } catch (const std::bad_alloc&) {
    FAIL("std::bad_alloc: the length sized an allocation");
  }
  listener.reset();
  fake.join();
}

TEST_CASE("mesh: a stranger's abort, hijacked links and forged lengths change nothing", "[comm][intruder]") {
  Options o = test::quick_options();
  o.fusion = true;
  auto store = make_memory_store();
  saker::log::set_sink(capture);
  std::atomic<int> created{0};
  std::atomic<bool> attacked{false};
  test::Failures failures;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto c = Communicator::create(store, Placement{r, 2, "node" + std::to_string(r), "h", -1}, o);
        auto warm = pattern(r, 1000);
        c->allreduce(warm.data(), warm.size(), DataType::f32);  // every ring link exists now
        ++created;
        while (!attacked) std::this_thread::sleep_for(5ms);
        for (int i = 0; i < 20; ++i) {
          auto v = pattern(r, 65'537);
          c->allreduce(v.data(), v.size(), DataType::f32);
          if (!summed(v, 2)) failures.add("rank " + std::to_string(r) + ": wrong sum");
          auto f = pattern(r, 4096);
          c->enqueue_allreduce("grad", f.data(), f.size(), DataType::f32).wait();
          if (!summed(f, 2)) failures.add("rank " + std::to_string(r) + ": wrong fused sum");
        }
        c->barrier();
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    });
  while (created < 2 && failures.items.empty()) std::this_thread::sleep_for(5ms);
  std::vector<net::Fd> held;
  for (int victim = 0; victim < 2 && failures.items.empty(); ++victim) {
    std::istringstream entry(store->get("saker/rank/" + std::to_string(victim), 1s));
    std::string host;
    int port = 0;
    entry >> host >> port;
    const int other = 1 - victim;
    // Hijack every link the victim accepts (and its fusion channel) claiming the peer,
    // then send a negotiation length of 2^48 bytes.
    for (int channel : {0, 1, 64, 65}) {
      auto fd = attacker_connect(host, port);
      std::uint64_t huge = 1ull << 48;
      say(fd.get(), old_hello(1, other, channel, 0) + std::string(reinterpret_cast<char*>(&huge), 8) +
                        std::string(64, '\x7f'));
      held.push_back(std::move(fd));
    }
    // Abort, in the old format and after a forged new-format greeting.
    auto abort_fd = attacker_connect(host, port);
    say(abort_fd.get(), old_hello(2, other, 0, static_cast<std::uint32_t>(kAttackerText.size())) + kAttackerText);
    hear(abort_fd.get(), 3s);  // the victim hangs up once it has read (or refused) it
    auto forged = attacker_connect(host, port);
    say(forged.get(), std::string(64, '\x01') + std::string(32, '\x02') + kAttackerText);
    hear(forged.get(), 3s);
  }
  attacked = true;
  for (auto& t : ranks) t.join();
  saker::log::set_sink(nullptr);
  CHECK(failures.text() == "");
  CHECK(failures.text().find(kAttackerText) == std::string::npos);
  std::lock_guard lock(log_mu);
  CHECK(log_lines.find(kAttackerText) == std::string::npos);
#ifndef SAKER_TEST_OLD_API
  CHECK(log_lines.find("did not prove the job key") != std::string::npos);
#endif
}

#ifndef SAKER_TEST_OLD_API
TEST_CASE("mesh and store: a peer with another key is refused and named", "[comm][intruder]") {
  Options o = test::quick_options();
  o.timeout = 3s;
  auto server = serve_store(o);
  Options wrong = o;
  wrong.job_key = std::string(32, '\x11');
  CHECK_THROWS_WITH(store_client(server->port(), wrong), Catch::Contains("is not this job's store") &&
                                                             Catch::Contains(std::to_string(server->port())));
  CHECK(store_client(server->port(), o) != nullptr);  // the store serves on
  auto store = make_memory_store();
  std::thread peer([&] {
    try {
      Communicator::create(store, Placement{1, 2, "b", "h", -1}, wrong);
    } catch (const std::exception&) {
    }
  });
  try {
    auto c = Communicator::create(store, Placement{0, 2, "a", "h", -1}, o);
    float x = 1;
    c->allreduce(&x, 1, DataType::f32);
    FAIL("a rank with another key joined");
  } catch (const saker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("job-key handshake") || Catch::Contains("job key"));
  }
  peer.join();
}
#endif

#ifndef SAKER_TEST_OLD_API
// A rank's announced negotiation length and its tensor lines are checked before they
// size anything: an error naming the rank, never std::bad_alloc.
TEST_CASE("fusion: forged negotiation lengths and tensor sizes are refused, naming the rank", "[comm][intruder]") {
  auto who = [](int r) { return "rank " + std::to_string(r) + " (host h" + std::to_string(r) + ")"; };
  CHECK(fusion_wire::checked_width({10, 300, 7}, who) == 300);
  CHECK_THROWS_WITH(fusion_wire::checked_width({10, 1ull << 48}, who),
                    Catch::Contains("rank 1 (host h1)") && Catch::Contains("281474976710656 bytes"));
  const std::string sep(1, '\x1f');
  auto line = [&](const std::string& count, const std::string& type, const std::string& op) {
    return "S0\ngrad" + sep + count + sep + type + sep + op + sep + "0\n";
  };
  auto ok = fusion_wire::decode(line("4096", "0", "0"), "rank 1");
  REQUIRE(ok.items.size() == 1);
  CHECK(ok.items[0].first == "grad");
  CHECK(ok.items[0].second.count == 4096);
  for (const auto& bad : {line("12x", "0", "0"), line("", "0", "0"), line("4096", "9", "0"), line("4096", "0", "-1"),
                          line("99999999999999999999", "0", "0"), line(std::to_string(1ull << 62), "1", "0")}) {
    INFO(bad);
    CHECK_THROWS_AS(fusion_wire::decode(bad, "rank 1 (host h1)"), saker::Error);
    CHECK_THROWS_WITH(fusion_wire::decode(bad, "rank 1 (host h1)"), Catch::Contains("rank 1 (host h1)"));
  }
}
#endif

#ifndef SAKER_TEST_OLD_API
// A stranger that connects and says nothing holds a place in the listener's table until
// Mesh::kHandshakeLimit, not the listener: a rank's link opened meanwhile is accepted
// while the stranger is still connected.
TEST_CASE("mesh: a silent stranger on a listener holds up no link", "[comm][intruder]") {
  auto loopback = test::loopback_peers(2);
  auto& peers = loopback.peers;
  auto& listeners = loopback.listeners;
  auto ctx = [] { return auth::Context{auth::JobKey::from_raw(test::test_key()), "test"}; };
  Mesh rank1(1, peers, std::move(listeners[1]), 20s, ctx());
  std::vector<net::Fd> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(attacker_connect("127.0.0.1", peers[1].port));
  Mesh rank0(0, peers, std::move(listeners[0]), 20s, ctx());
  int a = rank0.link(1, 5);
  int b = rank1.link(0, 5);
  const char ping = 'x';
  REQUIRE(::send(a, &ping, 1, MSG_NOSIGNAL) == 1);
  char got = 0;
  REQUIRE(recv(b, &got, 1, 0) == 1);
  CHECK(got == 'x');
  CHECK(rank0.link_keys(1, 5).send == rank1.link_keys(0, 5).recv);
  CHECK(rank0.link_keys(1, 5).recv == rank1.link_keys(0, 5).send);
  for (auto& s : silent) {  // still connected: the link did not wait for their handshakes to end
    pollfd p{s.get(), POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0);
  }
}
#endif


// Denial of service (issue 28): 1500 silent connections, more than the store's process has
// descriptors. The old store took them until accept failed (EMFILE) and a rank's
// connection waited behind them past its timeout.
using saker::comm::test::FdLimit;
using saker::comm::test::SilentFlood;

TEST_CASE("store: a flood of silent strangers exhausts no descriptors and keeps no rank out", "[comm][intruder]") {
  FdLimit limit(1024);
  Options o = test::quick_options();
  o.timeout = 5s;  // below the strangers' 10 s handshake deadline: no waiting them out
  auto server = serve_store(o);
  SilentFlood flood(server->port(), 1500);
  auto client = store_client(server->port(), o);
  client->set("saker/rank/0", "rank-address-1234");
  CHECK(store_client(server->port(), o)->get("saker/rank/0", 5s) == "rank-address-1234");
}

#ifndef SAKER_TEST_OLD_API
// 1200 silent connections on a rank's listener: more than the 64 handshakes the old
// listener ran at once plus its 512-connection backlog, so the real peer's connect waited
// (or was dropped) behind them for the handshake deadline, over and over.
TEST_CASE("mesh: a flood of silent strangers on a listener holds up no link", "[comm][intruder]") {
  auto loopback = test::loopback_peers(2);
  auto& peers = loopback.peers;
  auto& listeners = loopback.listeners;
  auto ctx = [] { return auth::Context{auth::JobKey::from_raw(test::test_key()), "test"}; };
  FdLimit limit(1024);
  Mesh rank1(1, peers, std::move(listeners[1]), 5s, ctx());
  SilentFlood flood(peers[1].port, 1200);
  Mesh rank0(0, peers, std::move(listeners[0]), 5s, ctx());
  int a = rank0.link(1, 3);
  int b = rank1.link(0, 3);
  const char ping = 'y';
  REQUIRE(::send(a, &ping, 1, MSG_NOSIGNAL) == 1);
  char got = 0;
  REQUIRE(recv(b, &got, 1, 0) == 1);
  CHECK(got == 'y');
}
#endif
