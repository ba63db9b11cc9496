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

// Seals len bytes of plain into frame under the nonce of seq; false when EVP fails.
bool seal_frame(EVP_CIPHER_CTX* c, std::uint64_t seq, const void* plain, std::size_t len, unsigned char* frame) {
  put_u32(frame, static_cast<std::uint32_t>(len));
  const auto nonce = nonce_of(seq);
  int out = 0;
  return EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
         EVP_EncryptUpdate(c, nullptr, &out, frame, kHeader) == 1 &&
         EVP_EncryptUpdate(c, frame + kHeader, &out, static_cast<const unsigned char*>(plain), static_cast<int>(len)) == 1 &&
         static_cast<std::size_t>(out) == len && EVP_EncryptFinal_ex(c, frame + kHeader + len, &out) == 1 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kTag, frame + kHeader + len) == 1;
}

// Opens a whole frame (length checked) under the nonce of seq into plain, which may be
// frame + kHeader (in place); false when the tag fails.
bool open_frame(EVP_CIPHER_CTX* c, std::uint64_t seq, const unsigned char* frame, void* plain) {
  const std::size_t len = get_u32(frame);
  const auto nonce = nonce_of(seq);
  unsigned char tag[kTag];
  std::memcpy(tag, frame + kHeader + len, kTag);
  int out = 0;
  return EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
         EVP_DecryptUpdate(c, nullptr, &out, frame, kHeader) == 1 &&
         EVP_DecryptUpdate(c, static_cast<unsigned char*>(plain), &out, frame + kHeader, static_cast<int>(len)) == 1 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kTag, tag) == 1 &&
         EVP_DecryptFinal_ex(c, static_cast<unsigned char*>(plain) + len, &out) == 1;
}

Tampered tampered_at(const std::string& link, std::uint64_t seq, const std::string& what) {
  return Tampered(explain("saker: " + link + " was tampered with or reordered: " + what,
                          "frame " + std::to_string(seq) + " of this direction did not authenticate (AES-256-GCM over its "
                          "length, sequence number and bytes): changed, replayed, reordered, dropped or cut on the way",
                          "nothing of it was used; look for what rewrites traffic between the two hosts, then "
                          "rerun"));
}

std::size_t checked_length(const unsigned char* header, std::size_t limit, const std::string& link, std::uint64_t seq) {
  const std::size_t len = get_u32(header);
  if (len == 0 || len > limit || len > kMaxFrame)
    throw tampered_at(link, seq, "a frame announces " + std::to_string(len) + " bytes, " + (len == 0 ? "none" : "more than the " +
                      std::to_string(std::min(limit, kMaxFrame)) + " expected") + " (or the ranks disagree on SAKER_COMM_CHUNK_BYTES)");
  return len;
}

Error sequence_exhausted(const std::string& link) {
  return Error(explain("saker: " + link + " has sealed 2^64-1 frames", "its nonces would repeat under the same key",
                       "start a new communicator (new links get new keys)"));
}

}  // namespace

Sealer::Sealer(const Key& key, std::string link, std::uint64_t first)
    : ctx_(keyed(key, true)), seq_(first), link_(std::move(link)) {}
Sealer::~Sealer() = default;

void Sealer::seal(const void* plain, std::size_t len, unsigned char* frame) {
  SAKER_ASSERT(len > 0 && len <= kMaxFrame, "sealed frame of a bad size");
  if (seq_ == std::numeric_limits<std::uint64_t>::max()) throw sequence_exhausted(link_);
  if (!seal_frame(ctx_->ctx, seq_, plain, len, frame)) throw Error("saker: AES-256-GCM sealing failed on " + link_ + " (OpenSSL EVP)");
  ++seq_;
}

Opener::Opener(const Key& key, std::string link, std::uint64_t first)
    : ctx_(keyed(key, false)), seq_(first), link_(std::move(link)) {}
Opener::~Opener() = default;

void Opener::tampered(const std::string& what) const { throw tampered_at(link_, seq_, what); }

std::size_t Opener::length(const unsigned char* header, std::size_t limit) const {
  return checked_length(header, limit, link_, seq_);
}

void Opener::open(const unsigned char* frame, void* plain) {
  SAKER_ASSERT(get_u32(frame) > 0 && get_u32(frame) <= kMaxFrame, "opened a frame whose length was not checked");
  if (!open_frame(ctx_->ctx, seq_, frame, plain)) tampered("the tag did not match");
  ++seq_;
}

struct FrameJob : Job {
  std::unique_ptr<CipherCtx> ctx;
  std::vector<unsigned char> frame;  // [header][ciphertext][tag]; grows once to the largest
  std::uint64_t seq = 0;
  const char* src = nullptr;  // sealing: the payload
  char* plain = nullptr;      // opening: where the payload goes
  std::size_t len = 0, offset = 0;
  bool ok = true;
  bool offered = false;  // to the pool's helpers (else only its owner will run it)
};

namespace {

void seal_job(Job& job) {
  auto& j = static_cast<FrameJob&>(job);
  j.ok = seal_frame(j.ctx->ctx, j.seq, j.src, j.len, j.frame.data());
}

void open_job(Job& job) {
  auto& j = static_cast<FrameJob&>(job);
  j.ok = open_frame(j.ctx->ctx, j.seq, j.frame.data(), j.plain);
}

// Two frames per thread in flight: one being sealed or opened, one on the wire.
std::vector<std::unique_ptr<FrameJob>> frame_jobs(const Key& key, bool encrypt, const void* owner, CryptoPool* pool) {
  std::vector<std::unique_ptr<FrameJob>> jobs;
  const std::size_t n = pool ? 2 * (static_cast<std::size_t>(pool->helpers()) + 1) : 1;
  for (std::size_t i = 0; i < n; ++i) {
    auto j = std::make_unique<FrameJob>();
    j->ctx = keyed(key, encrypt);
    j->owner = owner;
    j->work = encrypt ? seal_job : open_job;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Cancels what no helper has started, waits for what one has: afterwards no helper
// touches the frames [head, tail) or the buffers they point into.
void drain_jobs(CryptoPool* pool, const void* owner, std::vector<std::unique_ptr<FrameJob>>& slots, std::size_t head,
                std::size_t tail) {
  if (pool) pool->forget(owner);
  for (std::size_t i = head; i < tail; ++i) {
    FrameJob& j = *slots[i % slots.size()];
    if (j.claim()) j.state.store(Job::kFree, std::memory_order_relaxed);
    else j.complete();
  }
}

// Below this a frame is sealed or opened faster (under 12 us) than a helper wakes up
// for it: its owner does it when it needs it.
constexpr std::size_t kPoolFrame = 64 * 1024;

void offer_job(FrameJob& j, CryptoPool* pool) {
  j.offered = pool && j.len >= kPoolFrame;
  j.state.store(Job::kPending, std::memory_order_release);
  if (j.offered) pool->submit(j);
}

}  // namespace

SealedSender::SealedSender(const Key& key, std::string link, CryptoPool* pool)
    : link_(std::move(link)), pool_(pool), slots_(frame_jobs(key, true, this, pool)) {}
SealedSender::~SealedSender() { drain(); }

void SealedSender::drain() { drain_jobs(pool_, this, slots_, head_, tail_); }

void SealedSender::start(const char* data, std::size_t len, std::size_t frame_bytes) {
  if (!done()) throw Error("saker: " + link_ + " failed earlier in the middle of a frame; it cannot be used again");
  data_ = data;
  len_ = len;
  submitted_ = out_ = head_ = tail_ = 0;
  frame_bytes_ = std::min(std::max<std::size_t>(frame_bytes, 1), kMaxFrame);
}

void SealedSender::offer(std::size_t available) {
  const std::size_t upto = std::min(available, len_);
  while (tail_ - head_ < slots_.size() && submitted_ < upto) {
    if (next_seq_ == std::numeric_limits<std::uint64_t>::max()) throw sequence_exhausted(link_);
    FrameJob& j = *slots_[tail_ % slots_.size()];
    j.len = std::min(upto - submitted_, frame_bytes_);
    if (j.frame.size() < j.len + kOverhead) j.frame.resize(j.len + kOverhead);
    j.src = data_ + submitted_;
    j.seq = next_seq_++;
    offer_job(j, pool_);
    submitted_ += j.len;
    ++tail_;
  }
}

ssize_t SealedSender::pump(int fd, std::size_t available) {
  offer(available);
  if (head_ == tail_) {
    errno = EAGAIN;
    return -1;
  }
  FrameJob& j = *slots_[head_ % slots_.size()];
  j.complete();
  if (!j.ok) throw Error("saker: AES-256-GCM sealing failed on " + link_ + " (OpenSSL EVP)");
  const std::size_t frame_len = j.len + kOverhead;
  ssize_t k = ::send(fd, j.frame.data() + out_, frame_len - out_, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0 && (out_ += static_cast<std::size_t>(k)) == frame_len) {
    j.state.store(Job::kFree, std::memory_order_relaxed);
    ++head_;
    out_ = 0;
    offer(available);
  }
  return k;
}

SealedReceiver::SealedReceiver(const Key& key, std::string link, CryptoPool* pool)
    : link_(std::move(link)), pool_(pool), slots_(frame_jobs(key, false, this, pool)) {}
SealedReceiver::~SealedReceiver() { drain(); }

void SealedReceiver::drain() { drain_jobs(pool_, this, slots_, head_, tail_); }

void SealedReceiver::start(char* dst, std::size_t len, std::size_t max_frame, std::size_t elem, bool staged) {
  if (!done() || have_ != 0 || head_ != tail_)
    throw Error("saker: " + link_ + " failed earlier in the middle of a frame; it cannot be used again");
  dst_ = dst;
  len_ = len;
  got_ = received_ = head_ = tail_ = 0;
  max_frame_ = std::min(max_frame, kMaxFrame);
  elem_ = std::max<std::size_t>(elem, 1);
  staged_ = staged;
}

// Reads into the frame being filled; a whole frame is offered for opening.
ssize_t SealedReceiver::receive(int fd) {
  FrameJob& j = *slots_[tail_ % slots_.size()];
  if (j.frame.size() < need_) j.frame.resize(need_);
  ssize_t k = ::recv(fd, j.frame.data() + have_, need_ - have_, MSG_DONTWAIT);
  if (k <= 0) return k;
  have_ += static_cast<std::size_t>(k);
  if (have_ < need_) return k;
  if (need_ == kHeader) {  // the header is in: bound the length before it sizes anything
    const std::size_t len = checked_length(j.frame.data(), std::min(max_frame_, len_ - received_), link_, next_seq_);
    if (staged_ && len % elem_ != 0)
      throw Tampered(explain("saker: " + link_ + " was tampered with or reordered: a frame of " + std::to_string(len) +
                                 " bytes splits an element of " + std::to_string(elem_),
                             "every frame of a reduction carries whole elements", "nothing of it was used"));
    need_ = kHeader + len + kTag;
    if (j.frame.size() < need_) j.frame.resize(need_);
    return k;
  }
  j.len = need_ - kOverhead;
  j.offset = received_;
  j.seq = next_seq_++;
  // Staged with helpers: opened in place (dst_ holds one frame, and several are open at
  // once), copied to dst_ when passed on.
  j.plain = !staged_ ? dst_ + received_ : pool_ ? reinterpret_cast<char*>(j.frame.data() + kHeader) : dst_;
  received_ += j.len;
  have_ = 0;
  need_ = kHeader;
  offer_job(j, pool_);
  ++tail_;
  return k;
}

// Passes on the opened frames in sequence, waiting (or opening here) for at most `wait`
// of those offered to helpers that are not open yet (the others it opens here).
// Returns the payload bytes passed on.
std::size_t SealedReceiver::deliver(const OnFrame& on_frame, std::size_t wait) {
  std::size_t n = 0;
  while (head_ != tail_) {
    FrameJob& j = *slots_[head_ % slots_.size()];
    if (!j.done()) {
      if (j.offered && wait == 0) break;
      if (j.offered) --wait;
      j.complete();
    }
    if (!j.ok) throw tampered_at(link_, j.seq, "the tag did not match");
    if (j.plain != dst_ + (staged_ ? 0 : j.offset)) std::memcpy(dst_, j.plain, j.len);
    got_ += j.len;
    n += j.len;
    if (on_frame) on_frame(j.offset, j.len);
    j.state.store(Job::kFree, std::memory_order_relaxed);
    ++head_;
  }
  return n;
}

ssize_t SealedReceiver::pump(int fd, const OnFrame& on_frame) {
  constexpr std::size_t kAll = ~std::size_t{0};
  ssize_t k = -1;
  int err = EAGAIN;
  if (tail_ - head_ < slots_.size() && received_ < len_) {
    try {
      k = receive(fd);
    } catch (const Tampered&) {  // a bad header: an earlier frame's failure, if any, is named first
      deliver(on_frame, kAll);
      throw;
    }
    err = errno;
  }
  if (k == 0) {  // the peer closed: whole frames before the cut still count
    deliver(on_frame, kAll);
    return 0;
  }
  if (k < 0 && err != EAGAIN && err != EINTR) {
    errno = err;
    return k;
  }
  // Without helpers every frame is opened as soon as it is whole; with them, the next
  // one is finished here only when nothing else is to be done.
  const std::size_t n = deliver(on_frame, !pool_ ? kAll : k < 0 ? 1 : 0);
  if (k > 0) return k;
  if (n > 0) return static_cast<ssize_t>(n);
  errno = err;
  return -1;
}

LinkCiphers::Both& LinkCiphers::both(int peer, int channel) {
  auto it = links_.find({peer, channel});
  if (it != links_.end()) return it->second;
  auto [send, recv] = keys_(peer, channel);
  const std::string ch = ", channel " + std::to_string(channel);
  Both b;
  b.tx = std::make_unique<SealedSender>(send, "the link to " + who_(peer) + ch, pool_.get());
  b.rx = std::make_unique<SealedReceiver>(recv, "the link from " + who_(peer) + ch, pool_.get());
  send.fill(0);
  recv.fill(0);
  return links_.emplace(std::make_pair(peer, channel), std::move(b)).first->second;
}

SealedSender& LinkCiphers::sender(int peer, int channel) { return *both(peer, channel).tx; }
SealedReceiver& LinkCiphers::receiver(int peer, int channel) { return *both(peer, channel).rx; }

}  // namespace saker::comm::aead
