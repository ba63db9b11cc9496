// AES-256-GCM frames of a link direction (launcher/comm/aead.hpp): round trips, and
// the attacker's edits on the wire (a flipped byte, tag or length, a replayed, swapped
// or dropped frame, a stream cut short), each detected, naming the link, with nothing
// of the frame passed on.
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

namespace {

Key key_of(unsigned char seed) {
  Key k;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<unsigned char>(seed + 7 * i);
  return k;
}

const std::string kLink = "the link from rank 1 (host h1), channel 0";

std::vector<char> pattern(std::size_t n, int salt = 0) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + static_cast<std::size_t>(salt)) >> 3);
  return v;
}

// "same", or where two results first differ (Catch would print megabytes of both).
std::string difference(const std::vector<char>& got, const std::vector<char>& want) {
  if (got == want) return "same";
  if (got.size() != want.size()) return std::to_string(got.size()) + " bytes, not " + std::to_string(want.size());
  auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
  return "byte " + std::to_string(at) + " differs";
}

std::vector<unsigned char> sealed(Sealer& s, const std::vector<char>& plain) {
  std::vector<unsigned char> f(plain.size() + kOverhead);
  s.seal(plain.data(), plain.size(), f.data());
  return f;
}

// Opens one frame as a receiver does: bound the length, then open.
// A frame whose length grew reads on into what follows it on the wire (zeros here).
std::vector<char> opened(Opener& o, std::vector<unsigned char> frame, std::size_t limit = kMaxFrame) {
  std::size_t len = o.length(frame.data(), limit);
  if (frame.size() < len + kOverhead) frame.resize(len + kOverhead);
  std::vector<char> plain(len);
  o.open(frame.data(), plain.data());
  return plain;
}

// What a SealedSender puts on the wire for these payloads (frames of frame_bytes).
std::string wire_of(const std::vector<char>& data, std::size_t frame_bytes, CryptoPool* pool = nullptr) {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  SealedSender tx(key_of(1), "the link to rank 0 (host h0), channel 0", pool);
  tx.start(data.data(), data.size(), frame_bytes);
  std::string out;
  char buf[65536];
  while (!tx.done()) {
    ssize_t k = tx.pump(sv[0], data.size());
    REQUIRE((k > 0 || errno == EAGAIN));
    for (ssize_t r; (r = ::recv(sv[1], buf, sizeof buf, MSG_DONTWAIT)) > 0;) out.append(buf, static_cast<std::size_t>(r));
  }
  close(sv[0]);
  for (ssize_t r; (r = ::recv(sv[1], buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(r));
  close(sv[1]);
  return out;
}

// Feeds bytes (then end of stream) to a SealedReceiver expecting len bytes; returns
// what it delivered through on_frame, or throws what it threw. *ended: the stream
// ended before len bytes arrived.
// staged: frames are passed on at dst[0] (a reduction's staging buffer).
std::vector<char> receive(const std::string& bytes, std::size_t len, std::size_t max_frame, bool* ended = nullptr,
                          CryptoPool* pool = nullptr, bool staged = false) {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  SealedReceiver rx(key_of(1), kLink, pool);
  std::vector<char> dst(len), delivered(len);
  rx.start(dst.data(), len, max_frame, 1, staged);
  std::size_t fed = 0;
  bool closed = false;
  auto cleanup = [&] { close(sv[0]); if (!closed) close(sv[1]); };
  try {
    while (!rx.done()) {
      if (fed < bytes.size()) {
        ssize_t w = ::send(sv[1], bytes.data() + fed, bytes.size() - fed, MSG_DONTWAIT);
        if (w > 0) fed += static_cast<std::size_t>(w);
      } else if (!closed) {
        close(sv[1]);
        closed = true;
      }
      ssize_t k = rx.pump(sv[0], [&](std::size_t off, std::size_t n) {
        std::memcpy(delivered.data() + off, dst.data() + (staged ? 0 : off), n);
      });
      if (k == 0) break;  // the peer closed
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  if (ended) *ended = !rx.done();
  delivered.resize(rx.got());
  return delivered;
}

void require_tamper_named(const std::function<void()>& f, const std::string& also = "") {
  try {
    f();
    FAIL("the edit went undetected");
  } catch (const Tampered& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find(kLink) != std::string::npos);
    CHECK(what.find("tampered with or reordered") != std::string::npos);
    CHECK(what.find(also) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("aead: frames round-trip at many sizes, with distinct ciphertext", "[comm][aead]") {
  Sealer s(key_of(1), "the link to rank 0 (host h0), channel 0");
  Opener o(key_of(1), kLink);
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{4097}, std::size_t{256 * 1024}}) {
    auto plain = pattern(n, static_cast<int>(n));
    auto f = sealed(s, plain);
    CHECK(std::memcmp(f.data() + kHeader, plain.data(), std::min<std::size_t>(n, 64)) != 0);
    CHECK(opened(o, f) == plain);
  }
  CHECK(s.sequence() == 5);
  CHECK(o.sequence() == 5);
  // The same payload twice seals differently (its own nonce each time).
  auto p = pattern(1024);
  CHECK(sealed(s, p) != sealed(s, p));
}

TEST_CASE("aead: a flipped ciphertext byte, tag or length is detected, naming the link", "[comm][aead][attack]") {
  auto plain = pattern(5000);
  for (std::size_t at : {kHeader, kHeader + 2500, kHeader + 4999, kHeader + 5000, kHeader + 5015, std::size_t{0}, std::size_t{1}}) {
    DYNAMIC_SECTION("byte " << at) {
      Sealer s(key_of(1), "to");
      Opener o(key_of(1), kLink);
      auto f = sealed(s, plain);
      f[at] ^= 0x01;
      require_tamper_named([&] { opened(o, f); });
    }
  }
}

TEST_CASE("aead: a wrong key, a replayed frame and two swapped frames are detected", "[comm][aead][attack]") {
  Sealer s(key_of(1), "to");
  auto a = sealed(s, pattern(3000, 1)), b = sealed(s, pattern(3000, 2));
  SECTION("wrong key (another link or direction)") {
    Opener o(key_of(2), kLink);
    require_tamper_named([&] { opened(o, a); });
  }
  SECTION("replayed") {
    Opener o(key_of(1), kLink);
    CHECK(opened(o, a) == pattern(3000, 1));
    require_tamper_named([&] { opened(o, a); });
  }
  SECTION("swapped") {
    Opener o(key_of(1), kLink);
    require_tamper_named([&] { opened(o, b); });
  }
}

TEST_CASE("aead: a sealer refuses to go past sequence 2^64-2 rather than reuse a nonce", "[comm][aead]") {
  const std::uint64_t last = ~std::uint64_t{0} - 1;
  Sealer s(key_of(1), "the link to rank 1 (host h1), channel 0", last);
  Opener o(key_of(1), kLink, last);
  auto plain = pattern(100);
  CHECK(opened(o, sealed(s, plain)) == plain);  // the last frame a key may seal
  try {
    sealed(s, plain);
    FAIL("a frame was sealed past the last sequence number");
  } catch (const saker::Error& e) {
    CHECK(std::string(e.what()).find("the link to rank 1 (host h1), channel 0 has sealed 2^64-1 frames") != std::string::npos);
  }
}

TEST_CASE("aead: a length above the bound is refused before anything is sized by it", "[comm][aead][attack]") {
  Opener o(key_of(1), kLink);
  unsigned char header[kHeader] = {0xff, 0xff, 0xff, 0x7f};
  require_tamper_named([&] { o.length(header, kMaxFrame); });
  unsigned char zero[kHeader] = {0, 0, 0, 0};
  require_tamper_named([&] { o.length(zero, kMaxFrame); });
  unsigned char small[kHeader] = {0x00, 0x10, 0, 0};  // 4096
  CHECK(o.length(small, 4096) == 4096);
  require_tamper_named([&] { o.length(small, 4095); });
}

// Every case runs without helpers (each frame sealed and opened on the calling thread)
// and with a pool of 1 and 3 helpers sealing ahead and opening behind.
TEST_CASE("aead: a stream of frames round-trips; edits to the stream are detected", "[comm][aead][attack]") {
  const int helpers = GENERATE(0, 1, 3);
  INFO("helpers: " << helpers);
  std::unique_ptr<CryptoPool> pool = helpers > 0 ? std::make_unique<CryptoPool>(helpers) : nullptr;
  CryptoPool* p = pool.get();
  // Frames of 64 KiB go to the helpers; the last, shorter one its owner does itself.
  const std::size_t n = 600000, frame = 65536;
  auto data = pattern(n, 9);
  const std::string wire = wire_of(data, frame, p);
  const std::size_t frames = (n + frame - 1) / frame, whole = frame + kOverhead;
  REQUIRE(wire.size() == n + frames * kOverhead);
  // Helpers seal the same frames under the same nonces: the wire is byte for byte the same.
  CHECK(wire == wire_of(data, frame));
  CHECK(wire.find(std::string(data.data() + 1000, 64)) == std::string::npos);  // no plaintext on the wire
  SECTION("intact") { CHECK(difference(receive(wire, n, frame, nullptr, p), data) == "same"); }
  SECTION("intact, staged: every frame passed on at the front of the buffer") {
    CHECK(difference(receive(wire, n, frame, nullptr, p, /*staged=*/true), data) == "same");
  }
  SECTION("a receiver that takes bigger frames than the sender sends") { CHECK(difference(receive(wire, n, kMaxFrame, nullptr, p), data) == "same"); }
  SECTION("a flipped byte in the third frame: named as frame 2") {
    std::string w = wire;
    w[2 * whole + 100] ^= 0x40;
    require_tamper_named([&] { receive(w, n, frame, nullptr, p); }, "frame 2 of this direction");
  }
  SECTION("a dropped frame") {
    std::string w = wire.substr(0, whole) + wire.substr(2 * whole);
    require_tamper_named([&] { receive(w, n, frame, nullptr, p); }, "frame 1 of this direction");
  }
  SECTION("two frames swapped") {
    std::string w = wire.substr(whole, whole) + wire.substr(0, whole) + wire.substr(2 * whole);
    require_tamper_named([&] { receive(w, n, frame, nullptr, p); }, "frame 0 of this direction");
  }
  SECTION("a replayed frame") {
    std::string w = wire.substr(0, whole) + wire.substr(0, whole) + wire.substr(whole);
    require_tamper_named([&] { receive(w, n, frame, nullptr, p); }, "frame 1 of this direction");
  }
  SECTION("a frame's length inflated past what is expected") {
    std::string w = wire;
    w[2] = 0x10;  // 1 MiB, more than a frame
    require_tamper_named([&] { receive(w, n, frame, nullptr, p); });
  }
  SECTION("the stream cut short: mid-frame, and after a whole frame") {
    for (std::size_t cut : {whole + 7, 2 * whole, wire.size() - 1}) {
      bool ended = false;
      auto got = receive(wire.substr(0, cut), n, frame, &ended, p);
      CHECK(ended);
      CHECK(got.size() == cut / whole * frame);  // only whole authenticated frames
      CHECK(std::equal(got.begin(), got.end(), data.begin()));
    }
  }
}

TEST_CASE("aead: a direction drained mid-stream (a failed collective) cannot be used again", "[comm][aead]") {
  CryptoPool pool(2);
  auto data = pattern(1u << 20, 3);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  {
    SealedSender tx(key_of(1), "the link to rank 0 (host h0), channel 0", &pool);
    tx.start(data.data(), data.size(), 65536);
    CHECK(tx.pump(sv[0], data.size()) > 0);  // frames offered to the helpers, the first one going out
    tx.drain();                               // no helper touches data after this
    data.assign(data.size(), 0);
    CHECK_FALSE(tx.done());
    CHECK_THROWS_WITH(tx.start(data.data(), data.size(), 65536), Catch::Contains("failed earlier in the middle of a frame"));
  }
  close(sv[0]);
  close(sv[1]);
}

TEST_CASE("aead: SAKER_COMM_CRYPTO_THREADS sets the threads; a bad value is refused, naming it", "[comm][aead]") {
  setenv("SAKER_COMM_CRYPTO_THREADS", "3", 1);
  CHECK(crypto_threads(1) == 3);
  for (const char* bad : {"0", "65", "two", "2x", ""}) {
    setenv("SAKER_COMM_CRYPTO_THREADS", bad, 1);
    CHECK_THROWS_WITH(crypto_threads(1), Catch::Contains("SAKER_COMM_CRYPTO_THREADS='" + std::string(bad) + "'") &&
                                             Catch::Contains("set a number from 1 to 64"));
  }
  unsetenv("SAKER_COMM_CRYPTO_THREADS");
  const int mine = crypto_threads(1);
  CHECK(mine >= 1);
  CHECK(mine <= 8);
  CHECK(crypto_threads(1000) == 1);  // a share of the machine below one CPU is one thread
}

// ---- A man in the middle of a real TCP ring -------------------------------------------

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
