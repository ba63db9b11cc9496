// Transit::encrypt on real TCP rings (launcher/comm/aead.hpp): a man in the middle who
// flips a bit in flight is detected, naming the link; a passive listener finds no tensor
// pattern; the fusion thread's traffic runs sealed; and results are bitwise those of
// auth and off, whatever the crypto threads. The frames themselves: comm_aead_test.cpp.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_support.hpp"
#include "launcher/comm/aead.hpp"
#include "launcher/comm/net.hpp"

using namespace saker::comm::aead;
using saker::comm::test::difference;

namespace {

using saker::comm::Communicator;
using saker::comm::DataType;
using saker::comm::Options;
using saker::comm::Placement;
using saker::comm::Store;
using saker::comm::Transit;
using saker::comm::Transport;

// A TCP proxy that forwards every connection to target and flips one bit of the
// client-to-server stream at byte flip_at (once, on the first connection that gets
// that far): an attacker who poisoned the store so that rank 0 reaches rank 1 through
// it. The handshake passes untouched; so, with a job key, the links still authenticate.
class FlippingProxy {
 public:
  FlippingProxy(std::string host, int port, std::size_t flip_at) : host_(std::move(host)), port_(port), flip_at_(flip_at) {
    listener_ = saker::comm::net::listen_on("127.0.0.1", 0, &my_port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FlippingProxy() {
    stop_ = true;
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return my_port_; }
  bool flipped() const { return flipped_; }
  // Everything it forwarded from clients to servers (a passive listener's view).
  std::string captured() {
    std::lock_guard lock(mu_);
    return captured_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      auto fd = saker::comm::net::accept_until(listener_.get(), saker::comm::net::deadline_in(std::chrono::milliseconds(50)));
      if (!fd) continue;
      saker::comm::net::Fd up;
      try {
        up = saker::comm::net::connect_to(host_, port_, saker::comm::net::deadline_in(std::chrono::seconds(5)), "target");
      } catch (...) {
        continue;
      }
      std::lock_guard lock(mu_);
      int a = fd.release(), b = up.release();
      fds_.push_back(a);
      fds_.push_back(b);
      pumps_.emplace_back([this, a, b] { pump(a, b, true); });
      pumps_.emplace_back([this, a, b] { pump(b, a, false); });
    }
  }
  void pump(int from, int to, bool client_to_server) {
    std::vector<char> buf(65536);
    std::size_t seen = 0;
    for (;;) {
      ssize_t k = ::recv(from, buf.data(), buf.size(), 0);
      if (k <= 0) break;
      std::size_t n = static_cast<std::size_t>(k);
      if (client_to_server && flip_at_ >= seen && flip_at_ < seen + n && !flipped_.exchange(true))
        buf[flip_at_ - seen] ^= 0x10;
      if (client_to_server) {
        std::lock_guard lock(mu_);
        captured_.append(buf.data(), n);
      }
      seen += n;
      if (!saker_send_all(to, buf.data(), n)) break;
    }
    ::shutdown(to, SHUT_WR);
  }
  static bool saker_send_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  }

  std::string host_;
  int port_, my_port_ = 0;
  std::size_t flip_at_;
  saker::comm::net::Fd listener_;
  std::atomic<bool> stop_{false}, flipped_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
  std::string captured_;
};

// Rank 0's view of the shared store, poisoned: rank 1's address and port are the proxy's.
class PoisonedStore : public Store {
 public:
  PoisonedStore(std::shared_ptr<Store> real, std::function<std::string(const std::string&)> rewrite)
      : real_(std::move(real)), rewrite_(std::move(rewrite)) {}
  void set(const std::string& k, const std::string& v) override { real_->set(k, v); }
  std::string get(const std::string& k, std::chrono::milliseconds t) override {
    std::string v = real_->get(k, t);
    return k == "saker/rank/1" ? rewrite_(v) : v;
  }
  std::string describe() const override { return real_->describe(); }

 private:
  std::shared_ptr<Store> real_;
  std::function<std::string(const std::string&)> rewrite_;
};

struct MitmOutcome {
  bool flipped = false;
  std::string captured;  // rank 0 -> rank 1, as the proxy saw it
  std::string errors[2];
  bool wrong[2] = {false, false};  // completed with a result other than the reference
};

// Two ranks on two "nodes"; rank 0 reaches rank 1 only through the proxy, which flips
// a bit deep inside rank 0's first reduce-scatter data (the ring algorithm at every
// size, no calibration traffic before it).
// kNoFlip: the proxy only listens.
constexpr std::size_t kNoFlip = ~std::size_t{0};

// A run whose rank 0 tensor is i % 7 + r, as bytes: what a listener would look for.
std::string rank0_pattern(std::size_t floats) {
  std::vector<float> v(floats);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

MitmOutcome run_through_proxy(Transit transit, std::size_t flip_at = 40000) {
  setenv("SAKER_COMM_DIRECT_BYTES", "0", 1);
  setenv("SAKER_COMM_EXCHANGE_BYTES", "0", 1);
  auto real = saker::comm::make_memory_store();
  std::unique_ptr<FlippingProxy> proxy;
  std::mutex proxy_mu;
  auto rewrite = [&](const std::string& entry) {
    // "address port rest...": the proxy forwards to the real listener.
    std::istringstream in(entry);
    std::string address, rest;
    int port = 0;
    in >> address >> port;
    std::getline(in, rest);
    std::lock_guard lock(proxy_mu);
    if (!proxy) proxy = std::make_unique<FlippingProxy>(address, port, flip_at);
    return "127.0.0.1 " + std::to_string(proxy->port()) + rest;
  };
  MitmOutcome out;
  Options o = saker::comm::test::quick_options();
  o.transit = transit;
  o.timeout = std::chrono::seconds(5);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        std::shared_ptr<Store> store = real;
        if (r == 0) store = std::make_shared<PoisonedStore>(real, rewrite);
        Placement p;
        p.rank = r;
        p.size = 2;
        p.node = "n" + std::to_string(r);
        p.host = "host-n" + std::to_string(r);
        auto c = Communicator::create(store, p, o);
        std::vector<float> v(65536);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i + static_cast<std::size_t>(r)) % 7);
        c->allreduce(v.data(), v.size(), DataType::f32);
        for (std::size_t i = 0; i < v.size(); ++i)
          if (v[i] != static_cast<float>(i % 7 + (i + 1) % 7)) out.wrong[r] = true;
      } catch (const std::exception& e) {
        out.errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  out.flipped = proxy && proxy->flipped();
  if (proxy) out.captured = proxy->captured();
  proxy.reset();
  unsetenv("SAKER_COMM_DIRECT_BYTES");
  unsetenv("SAKER_COMM_EXCHANGE_BYTES");
  return out;
}

}  // namespace

TEST_CASE("encrypt: a bit flipped in flight on a real TCP ring is detected, naming the link", "[comm][aead][attack][mitm]") {
  SECTION("encrypt: no rank returns a wrong result; both ranks name the link from rank 0 as tampered with") {
    MitmOutcome m = run_through_proxy(Transit::encrypt);
    INFO("rank 0: " << m.errors[0] << "\nrank 1: " << m.errors[1]);
    REQUIRE(m.flipped);
    CHECK_FALSE(m.wrong[0]);
    CHECK_FALSE(m.wrong[1]);
    CHECK(m.errors[1].find("tampered with or reordered") != std::string::npos);
    CHECK(m.errors[1].find("the link from rank 0 (host host-n0), channel 0") != std::string::npos);
    // Rank 1 told rank 0 at once (an authenticated abort notice), so both name the cause.
    CHECK(m.errors[0].find("tampered with or reordered") != std::string::npos);
  }
  SECTION("the attack's teeth: authenticated links alone let the same flip through as a wrong result") {
    MitmOutcome m = run_through_proxy(Transit::auth);
    INFO("rank 0: " << m.errors[0] << "\nrank 1: " << m.errors[1]);
    REQUIRE(m.flipped);
    CHECK(m.errors[0].empty());
    CHECK(m.errors[1].empty());
    CHECK((m.wrong[0] || m.wrong[1]));
  }
}

TEST_CASE("encrypt: a passive listener on the wire finds no tensor pattern", "[comm][aead][attack][mitm]") {
  // 64 bytes of rank 0's tensor, from its first segment (which rank 0 sends to rank 1).
  const std::string needle = rank0_pattern(1000).substr(4 * 100, 64);
  MitmOutcome sealed = run_through_proxy(Transit::encrypt, kNoFlip);
  INFO("rank 0: " << sealed.errors[0] << "\nrank 1: " << sealed.errors[1]);
  REQUIRE(sealed.errors[0].empty());
  REQUIRE(sealed.errors[1].empty());
  CHECK_FALSE((sealed.wrong[0] || sealed.wrong[1]));
  REQUIRE(sealed.captured.size() > 65536 * 2);  // the proxy saw rank 0's half of the data
  CHECK(sealed.captured.find(needle) == std::string::npos);
  // The listener's teeth: with authenticated links alone the same pattern is on the wire.
  MitmOutcome clear = run_through_proxy(Transit::auth, kNoFlip);
  REQUIRE(clear.errors[0].empty());
  CHECK(clear.captured.find(needle) != std::string::npos);
}

TEST_CASE("encrypt: the fusion thread's negotiation and fused allreduces run sealed", "[comm][aead][encrypt]") {
  saker::comm::Options o = saker::comm::test::quick_options();
  o.transit = Transit::encrypt;
  o.fusion = true;
  saker::comm::test::run_ranks(2, [](Communicator& c, saker::comm::test::Failures& f) {
    std::vector<std::vector<float>> ts;
    std::vector<saker::comm::Handle> hs;
    for (int i = 0; i < 5; ++i) ts.emplace_back(static_cast<std::size_t>(1000 * (i + 1)), static_cast<float>(c.rank() + i));
    for (int i = 0; i < 5; ++i)
      hs.push_back(c.enqueue_allreduce("t" + std::to_string(i), ts[static_cast<std::size_t>(i)].data(),
                                       ts[static_cast<std::size_t>(i)].size(), DataType::f32));
    for (auto& h : hs) h.wait();
    for (int i = 0; i < 5; ++i)
      if (ts[static_cast<std::size_t>(i)].back() != static_cast<float>(1 + 2 * i)) f.add("fused tensor " + std::to_string(i));
  }, o, {"n0", "n1"});
}

namespace {

// What rank 0 of an n-rank TCP ring (a node per rank) ends up with after allreduces of
// random floats at sizes that take every path (exchange, direct, the ring with and
// without its send thread, a tail shorter than a chunk), an allgather and a broadcast.
std::vector<char> collective_bits(int n, Transit transit, int crypto_threads) {
  setenv("SAKER_COMM_CRYPTO_THREADS", std::to_string(crypto_threads).c_str(), 1);
  Options o = saker::comm::test::quick_options();
  o.transit = transit;
  o.transport = Transport::ring;
  std::vector<std::string> nodes;
  for (int r = 0; r < n; ++r) nodes.push_back("n" + std::to_string(r));
  std::vector<char> out;
  std::mutex mu;
  saker::comm::test::run_ranks(n, [&](Communicator& c, saker::comm::test::Failures&) {
    std::vector<char> mine;
    auto keep = [&](const void* p, std::size_t bytes) { mine.insert(mine.end(), static_cast<const char*>(p), static_cast<const char*>(p) + bytes); };
    std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(c.rank() + 1);
    auto rnd = [&x] {  // xorshift: values of every magnitude, so that the order of a sum shows
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<float>(static_cast<std::int64_t>(x >> 11) % 2000001 - 1000000) * std::ldexp(1.0f, static_cast<int>(x % 40) - 20);
    };
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}, std::size_t{(1u << 20) + 3}}) {
      std::vector<float> v(count);
      for (float& f : v) f = rnd();
      c.allreduce(v.data(), v.size(), DataType::f32);
      keep(v.data(), v.size() * sizeof(float));
    }
    std::vector<float> part(300001), all(part.size() * static_cast<std::size_t>(c.size()));
    for (float& f : part) f = rnd();
    c.allgather(part.data(), all.data(), part.size() * sizeof(float));
    keep(all.data(), all.size() * sizeof(float));
    c.broadcast(part.data(), part.size() * sizeof(float), c.size() - 1);
    keep(part.data(), part.size() * sizeof(float));
    if (c.rank() == 0) {
      std::lock_guard lock(mu);
      out = std::move(mine);
    }
  }, o, nodes);
  unsetenv("SAKER_COMM_CRYPTO_THREADS");
  return out;
}

}  // namespace

TEST_CASE("encrypt: results are bitwise those of auth and off, whatever the crypto threads", "[comm][aead][encrypt]") {
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    const std::vector<char> reference = collective_bits(n, Transit::off, 1);
    REQUIRE(reference.size() > (5u << 20));
    CHECK(difference(collective_bits(n, Transit::auth, 1), reference) == "same");
    for (int threads : {1, 2, 4}) {
      INFO("encrypt, SAKER_COMM_CRYPTO_THREADS=" << threads);
      CHECK(difference(collective_bits(n, Transit::encrypt, threads), reference) == "same");
    }
  }
}
