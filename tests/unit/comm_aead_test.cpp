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
using saker::comm::test::difference;

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
