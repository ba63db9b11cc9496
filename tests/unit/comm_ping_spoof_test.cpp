// A dead rank's port taken by another user (issue 28). Before a survivor blames the rank
// it lost, Mesh::fail pings it: a suspect that answers is taken for alive and blocked
// behind someone else, and the survivor waits (up to its whole timeout) for another
// rank's notice. A stranger who listens on the dead rank's freed port and answers those
// pings would make every survivor wait for a notice that never comes, and the job would
// end blaming whichever live rank gave up first. The ping runs the job-key handshake, so
// the squatter, who holds no key, must not be believed, whatever it answers:
//   pong:    the one byte a bare (unauthenticated) ping believed;
//   forged:  a well-formed handshake reply with a made-up MAC, an ack and a pong;
//   relay:   the survivor's handshake passed on to a live rank (the only ones who can
//            answer it) as it came, or re-targeted at that rank (retarget).
// Nor does the abort notice the survivor then sends to every rank reach the squatter.
//
// Built with -DSAKER_TEST_PING_WITHOUT_HANDSHAKE the ranks run without the job key
// (Transit::off: a ping is the bare claim, answered by one byte): every section fails
// there. In the pong and retarget sections the squatter is taken for rank 2 (rank 0 waits
// for a notice, blaming nobody); in the forged and relay ones rank 0 blames rank 2 but
// the squatter hears its notice. That is how this test was checked.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "common/error.hpp"
#include "comm_test_support.hpp"
#include "launcher/comm/auth.hpp"
#include "comm_mesh_support.hpp"
#include "launcher/comm/mesh.hpp"
#include "launcher/comm/net.hpp"

using namespace saker::comm;
using namespace std::chrono_literals;

namespace {

const std::string kLocalReason = "rank 2 (host host2) closed its link: REASON-c0ffee";

std::optional<auth::Context> job_context() {
#ifdef SAKER_TEST_PING_WITHOUT_HANDSHAKE
  return std::nullopt;
#else
  return auth::Context{auth::JobKey::from_raw(test::test_key()), "job 1 step 0"};
#endif
}

void say(int fd, const std::string& bytes) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {}
}

// Moves bytes both ways between a and b until either hangs up or `within` passes; what
// a sent is appended to *from_a.
void pump(int a, int b, std::chrono::milliseconds within, std::string* from_a) {
  const auto d = net::deadline_in(within);
  while (net::Clock::now() < d) {
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (poll(p, 2, net::poll_ms(d)) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      char buf[4096];
      ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      if (i == 0) from_a->append(buf, static_cast<std::size_t>(n));
      say(p[1 - i].fd, std::string(buf, static_cast<std::size_t>(n)));
    }
  }
}

std::uint32_t get_u32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
void set_u32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}

enum class Spoof { pong, forged, relay, retarget };

// Listens on the dead rank's port and answers every connection as `how` says. Counts
// the pings addressed to the dead rank and keeps every byte the survivors sent it.
class Squatter {
 public:
  Squatter(int port, Spoof how, int live_port) : how_(how), live_port_(live_port) {
    int bound = 0;
    listener_ = net::listen_on("127.0.0.1", port, &bound);
    REQUIRE(bound == port);
    thread_ = std::thread([this] { run(); });
  }
  ~Squatter() {
    stop_ = true;
    thread_.join();
  }
  int pings() const { return pings_; }
  std::string heard() {
    std::lock_guard lock(mu_);
    return heard_;
  }

 private:
  void run() {
    while (!stop_) {
      net::Fd fd = net::accept_until(listener_.get(), net::deadline_in(100ms));
      if (fd) answer(fd.get());
    }
  }
  // The Hello is the first 64 bytes in either mode (handshake or bare claim): byte 5 the
  // kind (4: ping), bytes 12..15 the rank it is meant for.
  void answer(int fd) {
    std::string got;
    if (how_ == Spoof::relay || how_ == Spoof::retarget) {
      net::Fd live = net::connect_to("127.0.0.1", live_port_, net::deadline_in(2s), "the live rank");
      std::string hello(auth::kHelloBytes, '\0');
      if (recv(fd, hello.data(), hello.size(), MSG_WAITALL) != static_cast<ssize_t>(hello.size())) return;
      got = hello;
      count(hello);
      if (how_ == Spoof::retarget) set_u32(hello, 12, 1);  // meant for the live rank 1
      say(live.get(), hello);
      pump(fd, live.get(), 3s, &got);
    } else {
      std::string hello(auth::kHelloBytes, '\0');
      if (recv(fd, hello.data(), hello.size(), MSG_WAITALL) != static_cast<ssize_t>(hello.size())) return;
      got = hello;
      count(hello);
      if (how_ == Spoof::pong) {
        say(fd, "\x01");
      } else {
        std::string reply(auth::kReplyBytes, '\0');
        set_u32(reply, 0, 0x31414b53);  // the handshake's magic, "SKA1"
        for (std::size_t i = 4; i < reply.size(); ++i) reply[i] = static_cast<char>(rng_());
        say(fd, reply + "\x01\x01");
      }
      net::Fd none;
      pump(fd, none.get(), 3s, &got);  // what else the survivor sends, until it hangs up
    }
    std::lock_guard lock(mu_);
    heard_ += got;
  }
  void count(const std::string& hello) {
    if (hello[5] == static_cast<char>(auth::Kind::ping) && get_u32(hello, 12) == 2) ++pings_;
  }

  Spoof how_;
  int live_port_;
  net::Fd listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> pings_{0};
  std::mutex mu_;
  std::string heard_;
  std::mt19937 rng_{7};
  std::thread thread_;
};

}  // namespace

TEST_CASE("mesh: a stranger on a dead rank's port is not taken for that rank", "[comm][intruder]") {
  Spoof how = Spoof::pong;
  SECTION("it answers the ping with a pong") { how = Spoof::pong; }
  SECTION("it answers with a forged handshake reply") { how = Spoof::forged; }
  SECTION("it relays the handshake to a live rank") { how = Spoof::relay; }
  SECTION("it relays the handshake re-targeted at a live rank") { how = Spoof::retarget; }

  auto loopback = test::loopback_peers(3);
  auto& peers = loopback.peers;
  auto& listeners = loopback.listeners;
  // Long enough that a survivor who believes the squatter waits past this test's deadline.
  const auto timeout = 120s;
  auto r0 = std::make_unique<Mesh>(0, peers, std::move(listeners[0]), timeout, job_context());
  auto r1 = std::make_unique<Mesh>(1, peers, std::move(listeners[1]), timeout, job_context());
  auto r2 = std::make_unique<Mesh>(2, peers, std::move(listeners[2]), timeout, job_context());
  r1->link(2, 0);
  r2->link(1, 0);
  r2.reset();  // rank 2 dies; its port is free, and the stranger takes it
  Squatter squatter(peers[2].port, how, peers[1].port);

  std::string r0_error;
  std::atomic<bool> r0_done{false};
  std::thread survivor([&] {
    try {
      r0->fail("allreduce", 2, kLocalReason);
    } catch (const saker::Error& e) {
      r0_error = e.what();
    }
    r0_done = true;
  });
  // Rank 0 finds rank 2 dead, tells the others and throws: its probe lasts a second.
  auto deadline = net::deadline_in(30s);
  while (!r0_done && net::Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  const bool decided = r0_done;
  if (!decided) {  // rank 0 believed the squatter and waits for a notice: give it one
    try {
      r1->fail_here("test", "rank 1 gives up waiting");
    } catch (const saker::Error&) {
    }
  }
  survivor.join();
  deadline = net::deadline_in(30s);
  while (!r1->aborted() && net::Clock::now() < deadline) std::this_thread::sleep_for(10ms);

  CHECK(squatter.pings() >= 1);  // the squatter was asked, and did answer
  CHECK(decided);
  // Rank 0 blamed rank 2 itself (not "aborted:" by someone else's notice), and rank 1
  // learnt it from rank 0.
  CHECK_THAT(r0_error, Catch::Contains("allreduce failed: " + kLocalReason));
  CHECK_THAT(r1->abort_reason(), Catch::Contains(kLocalReason) && Catch::Contains("seen by rank 0"));
  CHECK(squatter.heard().find("REASON-c0ffee") == std::string::npos);
}

// The squatter also learns what a Hello to the dead rank carries. Were the key id in it
// the same for every listener, it could send live rank 1 Hellos that pass the id check
// and never finish: each held one of rank 1's handshake threads (as the listener then
// ran them) for the handshake deadline, and with them all held rank 0's ping to rank 1
// went unanswered, so rank 0 blamed the live rank 1 instead of waiting for the real
// culprit's notice. The id is per listener (auth.cpp, target_id), so rank 1 drops those
// Hellos at once. (Copies of a Hello meant for rank 1 itself: comm_replay_test.cpp.)
TEST_CASE("mesh: what a dead rank's port hears does not get a live rank blamed", "[comm][intruder]") {
  auto loopback = test::loopback_peers(3);
  auto& peers = loopback.peers;
  auto& listeners = loopback.listeners;
  auto r0 = std::make_unique<Mesh>(0, peers, std::move(listeners[0]), 120s, job_context());
  auto r1 = std::make_unique<Mesh>(1, peers, std::move(listeners[1]), 120s, job_context());
  listeners[2].reset();  // rank 2 is gone; the stranger listens on its port
  int bound = 0;
  net::Fd squat = net::listen_on("127.0.0.1", peers[2].port, &bound);
  REQUIRE(bound == peers[2].port);
  std::atomic<bool> opened{false};
  std::thread opener([&] {  // rank 0 opens its link to rank 2, meets the stranger, gives up
    try {
      r0->link(2, 0);
    } catch (const saker::Error&) {
    }
    opened = true;
  });
  std::string hello(auth::kHelloBytes, '\0');
  for (bool heard = false; !opened;) {  // keeps the first Hello, hangs up on every try
    net::Fd fd = net::accept_until(squat.get(), net::deadline_in(100ms));
    if (fd && !heard) heard = recv(fd.get(), hello.data(), hello.size(), MSG_WAITALL) == static_cast<ssize_t>(hello.size());
  }
  opener.join();
  REQUIRE(get_u32(hello, 12) == 2);
  // Three times the handshake threads rank 1 once had (64): pings to rank 1, fresh nonces.
  std::vector<net::Fd> held;
  hello[5] = static_cast<char>(auth::Kind::ping);
  set_u32(hello, 8, 0);
  set_u32(hello, 12, 1);
  for (std::uint32_t i = 0; i < 192; ++i) {
    held.push_back(net::connect_to("127.0.0.1", peers[1].port, net::deadline_in(5s), "rank 1"));
    set_u32(hello, 32, i);
    say(held.back().get(), hello);
  }
  std::string r0_error;
  std::thread survivor([&] {
    try {
      r0->fail("allreduce", 1, "rank 1 (host host1) sent nothing: REASON-c0ffee");
    } catch (const saker::Error& e) {
      r0_error = e.what();
    }
  });
  // Rank 0's probe lasts at most a second; long after it, rank 1 (alive, and blocked
  // behind the real culprit) reports its own view, which rank 0 must be waiting for.
  std::this_thread::sleep_for(5s);
  try {
    r1->fail_here("allreduce", "rank 1 lost rank 2: MESSENGER");
  } catch (const saker::Error&) {
  }
  survivor.join();
  CHECK_THAT(r0_error, Catch::Contains("aborted: rank 1 lost rank 2: MESSENGER"));
  CHECK(r0_error.find("REASON-c0ffee") == std::string::npos);
}
