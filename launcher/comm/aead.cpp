#include "launcher/comm/aead.hpp"

#include <openssl/evp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace saker::comm::aead {

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

namespace {

constexpr std::size_t kNonce = 12;

// Keys the context once (the AES key schedule); each frame then sets its nonce only.
std::unique_ptr<CipherCtx> keyed(const Key& key, bool encrypt) {
  auto c = std::make_unique<CipherCtx>();
  if (!c->ctx || EVP_CipherInit_ex(c->ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr, encrypt ? 1 : 0) != 1)
    throw Error("saker: cannot set up AES-256-GCM (OpenSSL EVP): is libcrypto intact?");
  return c;
}

std::array<unsigned char, kNonce> nonce_of(std::uint64_t seq) {
  std::array<unsigned char, kNonce> n{};
  for (int i = 0; i < 8; ++i) n[4 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(seq >> (56 - 8 * i));
  return n;
}

void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint32_t get_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 | static_cast<std::uint32_t>(p[2]) << 16 |
         static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace

Sealer::Sealer(const Key& key, std::string link, std::uint64_t first)
    : ctx_(keyed(key, true)), seq_(first), link_(std::move(link)) {}
Sealer::~Sealer() = default;

void Sealer::seal(const void* plain, std::size_t len, unsigned char* frame) {
  SAKER_ASSERT(len > 0 && len <= kMaxFrame, "sealed frame of a bad size");
  if (seq_ == std::numeric_limits<std::uint64_t>::max())
    throw Error(explain("saker: " + link_ + " has sealed 2^64-1 frames", "its nonces would repeat under the same key",
                        "start a new communicator (new links get new keys)"));
  put_u32(frame, static_cast<std::uint32_t>(len));
  const auto nonce = nonce_of(seq_);
  EVP_CIPHER_CTX* c = ctx_->ctx;
  int out = 0;
  const bool ok = EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
                  EVP_EncryptUpdate(c, nullptr, &out, frame, kHeader) == 1 &&
                  EVP_EncryptUpdate(c, frame + kHeader, &out, static_cast<const unsigned char*>(plain), static_cast<int>(len)) == 1 &&
                  static_cast<std::size_t>(out) == len && EVP_EncryptFinal_ex(c, frame + kHeader + len, &out) == 1 &&
                  EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kTag, frame + kHeader + len) == 1;
  if (!ok) throw Error("saker: AES-256-GCM sealing failed on " + link_ + " (OpenSSL EVP)");
  ++seq_;
}

Opener::Opener(const Key& key, std::string link, std::uint64_t first)
    : ctx_(keyed(key, false)), seq_(first), link_(std::move(link)) {}
Opener::~Opener() = default;

void Opener::tampered(const std::string& what) const {
  throw Tampered(explain("saker: " + link_ + " was tampered with or reordered: " + what,
                         "frame " + std::to_string(seq_) + " of this direction did not authenticate (AES-256-GCM over its "
                         "length, sequence number and bytes): changed, replayed, reordered, dropped or cut on the way",
                         "nothing of it was used; look for what rewrites traffic between the two hosts, then "
                         "rerun"));
}

std::size_t Opener::length(const unsigned char* header, std::size_t limit) const {
  const std::size_t len = get_u32(header);
  if (len == 0 || len > limit || len > kMaxFrame)
    tampered("a frame announces " + std::to_string(len) + " bytes, " + (len == 0 ? "none" : "more than the " +
             std::to_string(std::min(limit, kMaxFrame)) + " expected") + " (or the ranks disagree on SAKER_COMM_CHUNK_BYTES)");
  return len;
}

void Opener::open(const unsigned char* frame, void* plain) {
  const std::size_t len = get_u32(frame);
  SAKER_ASSERT(len > 0 && len <= kMaxFrame, "opened a frame whose length was not checked");
  const auto nonce = nonce_of(seq_);
  EVP_CIPHER_CTX* c = ctx_->ctx;
  unsigned char tag[kTag];
  std::memcpy(tag, frame + kHeader + len, kTag);
  int out = 0;
  const bool ok = EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
                  EVP_DecryptUpdate(c, nullptr, &out, frame, kHeader) == 1 &&
                  EVP_DecryptUpdate(c, static_cast<unsigned char*>(plain), &out, frame + kHeader, static_cast<int>(len)) == 1 &&
                  EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kTag, tag) == 1 &&
                  EVP_DecryptFinal_ex(c, static_cast<unsigned char*>(plain) + len, &out) == 1;
  if (!ok) tampered("the tag did not match");
  ++seq_;
}

void SealedSender::start(const char* data, std::size_t len, std::size_t frame_bytes) {
  if (!done()) throw Error("saker: " + sealer_.link() + " failed earlier in the middle of a frame; it cannot be used again");
  data_ = data;
  len_ = len;
  sealed_ = frame_len_ = out_ = 0;
  frame_bytes_ = std::min(std::max<std::size_t>(frame_bytes, 1), kMaxFrame);
  if (frame_.size() < std::min(len, frame_bytes_) + kOverhead) frame_.resize(std::min(len, frame_bytes_) + kOverhead);
}

ssize_t SealedSender::pump(int fd, std::size_t available) {
  if (out_ == frame_len_) {
    const std::size_t upto = std::min(available, len_);
    const std::size_t n = upto > sealed_ ? std::min(upto - sealed_, frame_bytes_) : 0;
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    sealer_.seal(data_ + sealed_, n, frame_.data());
    sealed_ += n;
    frame_len_ = n + kOverhead;
    out_ = 0;
  }
  ssize_t k = ::send(fd, frame_.data() + out_, frame_len_ - out_, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0) out_ += static_cast<std::size_t>(k);
  return k;
}

void SealedReceiver::start(char* dst, std::size_t len, std::size_t max_frame, std::size_t elem, bool staged) {
  if (!done() || have_ != 0)
    throw Error("saker: " + opener_.link() + " failed earlier in the middle of a frame; it cannot be used again");
  dst_ = dst;
  len_ = len;
  got_ = 0;
  max_frame_ = std::min(max_frame, kMaxFrame);
  elem_ = std::max<std::size_t>(elem, 1);
  staged_ = staged;
  if (frame_.size() < kHeader) frame_.resize(kHeader);
}

ssize_t SealedReceiver::pump(int fd, const std::function<void(std::size_t, std::size_t)>& on_frame) {
  ssize_t k = ::recv(fd, frame_.data() + have_, need_ - have_, MSG_DONTWAIT);
  if (k <= 0) return k;
  have_ += static_cast<std::size_t>(k);
  if (have_ < need_) return k;
  if (need_ == kHeader) {  // the header is in: bound the length before it sizes anything
    std::size_t len = opener_.length(frame_.data(), std::min(max_frame_, len_ - got_));
    if (staged_ && len % elem_ != 0)
      throw Tampered(explain("saker: " + opener_.link() + " was tampered with or reordered: a frame of " +
                                 std::to_string(len) + " bytes splits an element of " + std::to_string(elem_),
                             "every frame of a reduction carries whole elements", "nothing of it was used"));
    need_ = kHeader + len + kTag;
    if (frame_.size() < need_) frame_.resize(need_);
    return k;
  }
  const std::size_t len = need_ - kOverhead, at = got_;
  opener_.open(frame_.data(), staged_ ? dst_ : dst_ + got_);
  got_ += len;
  have_ = 0;
  need_ = kHeader;
  if (on_frame) on_frame(at, len);
  return k;
}

LinkCiphers::Both& LinkCiphers::both(int peer, int channel) {
  auto it = links_.find({peer, channel});
  if (it != links_.end()) return it->second;
  auto [send, recv] = keys_(peer, channel);
  const std::string ch = ", channel " + std::to_string(channel);
  Both b;
  b.tx = std::make_unique<SealedSender>(send, "the link to " + who_(peer) + ch);
  b.rx = std::make_unique<SealedReceiver>(recv, "the link from " + who_(peer) + ch);
  send.fill(0);
  recv.fill(0);
  return links_.emplace(std::make_pair(peer, channel), std::move(b)).first->second;
}

SealedSender& LinkCiphers::sender(int peer, int channel) { return *both(peer, channel).tx; }
SealedReceiver& LinkCiphers::receiver(int peer, int channel) { return *both(peer, channel).rx; }

}  // namespace saker::comm::aead
