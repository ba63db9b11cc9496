// Encryption in transit (issue 28; saker-comm(3), ENCRYPTION IN TRANSIT): AES-256-GCM
// over one direction of a link, frame by frame (OpenSSL EVP).
//
// A frame on the wire: [u32 length, little-endian][length bytes of ciphertext][16-byte tag].
// The length is the additional authenticated data. The 96-bit nonce is never sent: four
// zero bytes, then the frame's sequence number in its direction (64 bits, big-endian),
// which both ends count. Each direction of a link has its own key (auth::LinkKeys from
// the link's handshake), so a nonce never repeats under a key; a sealer refuses to seal
// past sequence 2^64-2 rather than wrap. A flipped bit anywhere in a frame, and a frame
// replayed, dropped, reordered or moved to another link, fail the tag at the receiver
// (its nonce or key no longer match); a stream cut short leaves the receiver short of
// bytes (the peer closed, or the wait times out). The receiver bounds the length before
// it sizes or reads anything, and passes no byte of a frame on before its tag holds.
//
// The EVP contexts of each direction live as long as the link's sender or receiver (no
// allocation per frame). Neither is thread-safe: one thread drives a direction at a time
// (its pool's helpers only seal or open frames it hands them, aead_pool.hpp).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "launcher/comm/aead_pool.hpp"

namespace saker::comm::aead {

using Key = std::array<unsigned char, 32>;

inline constexpr std::size_t kHeader = 4;
inline constexpr std::size_t kTag = 16;
inline constexpr std::size_t kOverhead = kHeader + kTag;
// The longest payload a receiver accepts (its frame buffer's bound).
inline constexpr std::size_t kMaxFrame = 16u << 20;

// A frame that failed: tampered with, replayed, reordered, dropped or cut. what() names
// the link; nothing of the frame was used.
struct Tampered : Error {
  using Error::Error;
};

struct CipherCtx;  // EVP_CIPHER_CTX, kept behind the header

class Sealer {
 public:
  // link names the direction in errors, e.g. "the link to rank 1 (host n1), channel 0".
  // first: the first frame's sequence number (0 on a link; tests start near the end).
  Sealer(const Key& key, std::string link, std::uint64_t first = 0);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  // Seals len bytes (1..kMaxFrame) of plain into frame[0, len + kOverhead).
  void seal(const void* plain, std::size_t len, unsigned char* frame);
  std::uint64_t sequence() const { return seq_; }  // the next frame's
  const std::string& link() const { return link_; }

 private:
  std::unique_ptr<CipherCtx> ctx_;
  std::uint64_t seq_ = 0;
  std::string link_;
};

class Opener {
 public:
  Opener(const Key& key, std::string link, std::uint64_t first = 0);
  ~Opener();
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  // The payload length a frame header announces, once it is within [1, limit]
  // (limit: what the receiver can take now, at most kMaxFrame). Throws Tampered.
  std::size_t length(const unsigned char* header, std::size_t limit) const;
  // Opens a whole frame (header, ciphertext, tag; its length already checked) into
  // plain. Throws Tampered when the tag fails; then plain holds nothing to use.
  void open(const unsigned char* frame, void* plain);
  std::uint64_t sequence() const { return seq_; }  // the next frame's
  const std::string& link() const { return link_; }

 private:
  [[noreturn]] void tampered(const std::string& what) const;

  std::unique_ptr<CipherCtx> ctx_;
  std::uint64_t seq_ = 0;
  std::string link_;
};

// One frame of a stream on its way: a keyed context of its own (so that helpers can
// seal or open several frames of one direction at once), its bytes, where it goes.
struct FrameJob;

// One direction of a link as a non-blocking stream of frames. Both mirror send(2) and
// recv(2) for the ring's loops: >0 progress (bytes moved on the socket, or frames
// passed on), -1 with errno (EAGAIN: nothing to do now), and for the receiver 0 when
// the peer closed. With a pool, up to 2 frames per thread are sealed ahead or opened
// behind by its helpers; without one, each frame is sealed or opened when it is
// needed, on the calling thread. Either way frames go out, and are passed on, in
// sequence order, each under the nonce of its own sequence number.
class SealedSender {
 public:
  SealedSender(const Key& key, std::string link, CryptoPool* pool = nullptr);
  ~SealedSender();
  SealedSender(const SealedSender&) = delete;
  SealedSender& operator=(const SealedSender&) = delete;
  // Sends data[0, len) as frames of at most frame_bytes of payload.
  void start(const char* data, std::size_t len, std::size_t frame_bytes);
  // Offers frames of data[0, available) for sealing; once the frame in front is sealed
  // (here, or waiting for the helper sealing it), hands the kernel what it takes of it.
  ssize_t pump(int fd, std::size_t available);
  bool done() const { return submitted_ == len_ && head_ == tail_; }
  // Whether pump() has bytes for the socket (a frame not yet out, or data to seal).
  bool can_send(std::size_t available) const { return head_ != tail_ || submitted_ < std::min(available, len_); }
  std::uint64_t sequence() const { return next_seq_; }  // the next frame's
  const std::string& link() const { return link_; }
  // Stops every helper's work on this direction and waits for what has started (the
  // data may go away after a failed collective). A stream cut so stays unusable.
  void drain();

 private:
  void offer(std::size_t available);

  std::string link_;
  CryptoPool* pool_;
  std::vector<std::unique_ptr<FrameJob>> slots_;  // a ring: [head_, tail_) in flight
  const char* data_ = nullptr;
  std::size_t len_ = 0, submitted_ = 0, frame_bytes_ = 0, out_ = 0, head_ = 0, tail_ = 0;
  std::uint64_t next_seq_ = 0;
};

class SealedReceiver {
 public:
  // on_frame(offset, length): a frame whose tag held, offset in the whole payload.
  using OnFrame = std::function<void(std::size_t, std::size_t)>;
  SealedReceiver(const Key& key, std::string link, CryptoPool* pool = nullptr);
  ~SealedReceiver();
  SealedReceiver(const SealedReceiver&) = delete;
  SealedReceiver& operator=(const SealedReceiver&) = delete;
  // Expects len bytes of payload into dst. staged: every frame must be whole elems and
  // is passed on at dst[0] (dst holds max_frame bytes; with a pool it is opened in its
  // own buffer and copied there when its turn comes); else it is opened at dst + got().
  void start(char* dst, std::size_t len, std::size_t max_frame, std::size_t elem, bool staged);
  // Receives what has arrived (one frame at most), and calls on_frame for each frame in
  // sequence whose tag held. When nothing arrived it opens the next frame here, or
  // waits for the helper opening it, so that progress never waits on the socket alone.
  ssize_t pump(int fd, const OnFrame& on_frame);
  bool done() const { return got_ == len_; }
  std::size_t got() const { return got_; }
  std::uint64_t sequence() const { return next_seq_; }  // the next frame's to arrive
  const std::string& link() const { return link_; }
  void drain();  // as SealedSender::drain

 private:
  ssize_t receive(int fd);
  std::size_t deliver(const OnFrame& on_frame, std::size_t wait);

  std::string link_;
  CryptoPool* pool_;
  std::vector<std::unique_ptr<FrameJob>> slots_;
  char* dst_ = nullptr;
  std::size_t len_ = 0, got_ = 0, received_ = 0, max_frame_ = 0, elem_ = 1, have_ = 0, need_ = kHeader;
  std::size_t head_ = 0, tail_ = 0;
  std::uint64_t next_seq_ = 0;
  bool staged_ = false;
};

// Drains a collective's sealed directions when it ends, however it ends (no helper may
// touch its buffers afterwards).
struct Drain {
  SealedSender* tx = nullptr;
  SealedReceiver* rx = nullptr;
  Drain() = default;
  Drain(SealedSender* t, SealedReceiver* r) : tx(t), rx(r) {}
  Drain(const Drain&) = delete;
  Drain& operator=(const Drain&) = delete;
  ~Drain() {
    if (tx) tx->drain();
    if (rx) rx->drain();
  }
};

// The sealed directions of one communicator channel's links, made on first use from
// the keys of each link's handshake. keys(peer, channel) returns {send, recv};
// who(peer) names the peer ("rank 1 (host n1)").
class LinkCiphers {
 public:
  using Keys = std::function<std::pair<Key, Key>(int peer, int channel)>;
  using Who = std::function<std::string(int peer)>;
  // threads: crypto_threads() (aead_pool.hpp); above 1, a pool of threads-1 helpers
  // serves every direction of the channel.
  LinkCiphers(Keys keys, Who who, int threads = 1)
      : keys_(std::move(keys)), who_(std::move(who)), pool_(threads > 1 ? std::make_unique<CryptoPool>(threads - 1) : nullptr) {}
  SealedSender& sender(int peer, int channel);
  SealedReceiver& receiver(int peer, int channel);

 private:
  struct Both {
    std::unique_ptr<SealedSender> tx;
    std::unique_ptr<SealedReceiver> rx;
  };
  Both& both(int peer, int channel);

  Keys keys_;
  Who who_;
  std::unique_ptr<CryptoPool> pool_;  // outlives links_ (declared before it)
  std::map<std::pair<int, int>, Both> links_;
};

}  // namespace saker::comm::aead
