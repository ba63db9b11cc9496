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
// The EVP context of each direction lives as long as the link's sender or receiver (no
// allocation per frame). Neither is thread-safe: one thread drives a direction at a time.
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

// One direction of a link as a non-blocking stream of frames. Both mirror send(2) and
// recv(2) for the ring's loops: >0 bytes moved on the socket, -1 with errno (EAGAIN:
// nothing to do now), and for the receiver 0 when the peer closed.
class SealedSender {
 public:
  SealedSender(const Key& key, std::string link) : sealer_(key, std::move(link)) {}
  // Sends data[0, len) as frames of at most frame_bytes of payload.
  void start(const char* data, std::size_t len, std::size_t frame_bytes);
  // Once the previous frame is out, seals the next from data[sealed(), available);
  // then hands the kernel what it takes of the frame.
  ssize_t pump(int fd, std::size_t available);
  bool done() const { return sealed_ == len_ && out_ == frame_len_; }
  // Whether pump() has bytes for the socket (a frame not yet out, or data to seal).
  bool can_send(std::size_t available) const { return out_ < frame_len_ || sealed_ < std::min(available, len_); }
  std::size_t sealed() const { return sealed_; }
  Sealer& sealer() { return sealer_; }

 private:
  Sealer sealer_;
  std::vector<unsigned char> frame_;  // grows once to the largest frame
  const char* data_ = nullptr;
  std::size_t len_ = 0, sealed_ = 0, frame_bytes_ = 0, frame_len_ = 0, out_ = 0;
};

class SealedReceiver {
 public:
  SealedReceiver(const Key& key, std::string link) : opener_(key, std::move(link)) {}
  // Expects len bytes of payload into dst. staged: every frame is opened at dst[0]
  // (dst holds max_frame bytes) and must be whole elems; else at dst + got().
  void start(char* dst, std::size_t len, std::size_t max_frame, std::size_t elem, bool staged);
  // Receives what has arrived (one frame at most); when a frame is whole, opens it and
  // calls on_frame(offset, length) (offset: in the whole payload; may be empty).
  ssize_t pump(int fd, const std::function<void(std::size_t, std::size_t)>& on_frame);
  bool done() const { return got_ == len_; }
  std::size_t got() const { return got_; }
  Opener& opener() { return opener_; }

 private:
  Opener opener_;
  std::vector<unsigned char> frame_;
  char* dst_ = nullptr;
  std::size_t len_ = 0, got_ = 0, max_frame_ = 0, elem_ = 1, have_ = 0, need_ = kHeader;
  bool staged_ = false;
};

// The sealed directions of one communicator channel's links, made on first use from
// the keys of each link's handshake. keys(peer, channel) returns {send, recv};
// who(peer) names the peer ("rank 1 (host n1)").
class LinkCiphers {
 public:
  using Keys = std::function<std::pair<Key, Key>(int peer, int channel)>;
  using Who = std::function<std::string(int peer)>;
  LinkCiphers(Keys keys, Who who) : keys_(std::move(keys)), who_(std::move(who)) {}
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
  std::map<std::pair<int, int>, Both> links_;
};

}  // namespace saker::comm::aead
