#include "launcher/comm/ring.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <memory>
#include <thread>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "launcher/comm/aead.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {

Ring::Ring(Mesh& mesh, std::vector<int> members, int channel, std::size_t chunk_bytes, LinkPlan plan,
           aead::LinkCiphers* ciphers)
    : mesh_(mesh), ciphers_(ciphers), members_(std::move(members)), channel_(channel), chunk_(std::max<std::size_t>(chunk_bytes, 4096)),
      plan_(plan) {
  auto it = std::find(members_.begin(), members_.end(), mesh.rank());
  SAKER_ASSERT(it != members_.end(), "ring built on a rank outside it");
  index_ = static_cast<int>(it - members_.begin());
}

std::vector<std::size_t> Ring::even_split(std::size_t count, int parts) {
  std::vector<std::size_t> seg(static_cast<std::size_t>(parts) + 1, 0);
  std::size_t base = count / static_cast<std::size_t>(parts), extra = count % static_cast<std::size_t>(parts);
  for (int i = 0; i < parts; ++i)
    seg[static_cast<std::size_t>(i) + 1] = seg[static_cast<std::size_t>(i)] + base + (static_cast<std::size_t>(i) < extra ? 1 : 0);
  return seg;
}

namespace {

// Sends a large buffer on its own thread while the caller receives and reduces, so
// that one rank keeps both the kernel's send path (copy + loopback/NIC stack) and
// its receive path busy at once instead of alternating between them in one loop.
// Stop and failure are flags; the owner reports failures (Mesh::fail throws). With tx
// (Transit::encrypt) it seals each frame on this thread, started by the caller, while
// the previous one is still on the wire.
class SendThread {
 public:
  SendThread(Mesh& mesh, int fd, const char* p, std::size_t len, aead::SealedSender* tx) : mesh_(mesh) {
    thread_ = std::thread([this, fd, p, len, tx] {
      try {
        run(fd, p, len, tx);
      } catch (const std::exception& e) {  // sealing failed (exhausted sequence, EVP)
        set_error(e.what());
      }
    });
  }
  // Unwinding (the receive side failed): stop sending, then join.
  ~SendThread() {
    stop_.store(true, std::memory_order_relaxed);
    join();
  }
  // Waits until everything is sent or sending failed; returns "" or why it failed.
  std::string join() {
    if (thread_.joinable()) thread_.join();
    return error_;
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Bytes handed to the kernel so far: the receive loop counts these as progress
  // (a rank still accepting our data is alive), as the single-loop path does.
  std::size_t sent() const { return sent_.load(std::memory_order_relaxed); }

 private:
  void run(int fd, const char* p, std::size_t len, aead::SealedSender* tx) {
    std::size_t sent = 0;
    auto deadline = net::deadline_in(mesh_.timeout());
    while (tx ? !tx->done() : sent < len) {
      ssize_t k = tx ? tx->pump(fd, len) : ::send(fd, p + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += static_cast<std::size_t>(k);
        sent_.store(sent, std::memory_order_relaxed);
        deadline = net::deadline_in(mesh_.timeout());
        continue;
      }
      if (k < 0 && errno != EAGAIN && errno != EINTR) return set_error(std::string("sending failed: ") + std::strerror(errno));
      if (stop_.load(std::memory_order_relaxed) || mesh_.aborted()) return set_error("sending stopped");
      if (net::Clock::now() >= deadline) return set_error("timeout");
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, net::poll_ms(deadline));
    }
  }
  void set_error(std::string e) {
    error_ = std::move(e);
    failed_.store(true, std::memory_order_release);
  }

  Mesh& mesh_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, failed_{false};
  std::atomic<std::size_t> sent_{0};
  std::string error_;
};

// Opens what has arrived on a sealed direction. A frame that fails its tag ends the
// collective on every rank at once, naming the link: this rank knows what happened, so
// it neither pings the sender nor waits for anyone's notice.
ssize_t open_arrived(Mesh& mesh, aead::SealedReceiver& rx, int fd, const std::function<void(std::size_t, std::size_t)>& on_frame,
                     const char* during) {
  try {
    return rx.pump(fd, on_frame);
  } catch (const aead::Tampered& e) {
    std::string what = e.what();
    if (what.rfind("saker: ", 0) == 0) what.erase(0, 7);
    mesh.fail_here(during, what);
  }
}

// Below this a thread start costs more than the overlap gains.
constexpr std::size_t kThreadedSendBytes = 1u << 20;
// Exchanges up to LinkPlan::busy_poll_bytes busy-poll (yielding the core between
// tries) this long before they sleep in poll(): a blocking cross-core wake-up costs
// ~50 us on these VMs, which would dominate a 4 KiB allreduce. Large ones are CPU-bound
// over loopback, so they leave the core to the kernel's copies instead.
constexpr auto kBusyPoll = std::chrono::microseconds(200);
// Sizes the calibration times, and how often each (the median counts).
constexpr std::size_t kCalibrationSizes[] = {4096, 16384, 65536, 262144, 1u << 20};
constexpr int kCalibrationReps = 5;
// The exchange holds every member's whole buffer: only while that stays small.
constexpr std::size_t kExchangeHeld = 8u << 20;
bool exchange_fits(int n, std::size_t bytes) { return static_cast<std::size_t>(n - 1) * bytes <= kExchangeHeld; }

}  // namespace

bool Ring::send_thread_for(Phase phase, std::size_t step_bytes) {
  if (size() < 2 || step_bytes < kThreadedSendBytes) return false;
  if (plan_.send_thread >= 0) return plan_.send_thread == 1;
  TimedChoice& choice = send_thread_[phase];
  if (choice.agreement_due(step_bytes)) {
    // The slowest member's figure for each way decides, so every member picks the
    // same. 16 bytes: this allreduce is far below kThreadedSendBytes and asks nothing.
    std::array<double, 2> pooled = choice.figures(step_bytes);
    allreduce_ring(reinterpret_cast<char*>(pooled.data()), even_split(pooled.size(), size()), DataType::f64, ReduceOp::max);
    choice.agree(step_bytes, pooled[1] < pooled[0]);
  }
  return choice.second(step_bytes);
}

void Ring::record_phase(Phase phase, std::size_t step_bytes, bool threaded, net::Clock::time_point started) {
  if (size() < 2 || step_bytes < kThreadedSendBytes || plan_.send_thread >= 0) return;
  send_thread_[phase].record(step_bytes, threaded, std::chrono::duration<double>(net::Clock::now() - started).count());
}

void Ring::exchange(const void* sbuf, std::size_t slen, void* rbuf, std::size_t rlen, std::size_t elem,
                    const std::function<void(std::size_t, std::size_t)>& on_chunk, bool forward,
                    const char* during, bool threaded, bool staged) {
  int n = size();
  int next = members_[static_cast<std::size_t>((index_ + 1) % n)];
  int prev = members_[static_cast<std::size_t>((index_ + n - 1) % n)];
  // Each direction on its own socket (two ranks are each other's next and prev), so
  // that our send thread and our receive loop never wait on one socket's lock.
  const int sch = channel_between(index_, (index_ + 1) % n), rch = channel_between((index_ + n - 1) % n, index_);
  int sfd = slen > 0 ? mesh_.link(next, sch) : -1;
  int rfd = rlen > 0 ? mesh_.link(prev, rch) : -1;
  const char* sp = static_cast<const char*>(sbuf);
  char* rp = static_cast<char*>(rbuf);
  std::size_t sent = 0, got = 0, reduced = 0;
  // Chunks hold whole elements so that a chunk can be reduced on its own.
  std::size_t chunk = std::max(elem, chunk_ / elem * elem);
  // Transit::encrypt: every chunk travels as one sealed frame, and a frame is opened
  // (and reduced, staged) as soon as it has fully arrived; sent counts wire bytes then.
  aead::SealedSender* tx = ciphers_ && slen > 0 ? &ciphers_->sender(next, sch) : nullptr;
  aead::SealedReceiver* rx = ciphers_ && rlen > 0 ? &ciphers_->receiver(prev, rch) : nullptr;
  if (tx) tx->start(sp, slen, chunk);
  if (rx) rx->start(rp, rlen, staged ? chunk : aead::kMaxFrame, elem, staged);
  aead::Drain drain(tx, rx);  // after the send thread has stopped: no helper left on our buffers
  std::unique_ptr<SendThread> sender;
  if (threaded && !forward && slen > 0 && rlen > 0) {
    sender = std::make_unique<SendThread>(mesh_, sfd, sp, slen, tx);
    sent = slen;  // the thread owns the send side from here
  }
  auto sending = [&] { return tx ? !sender && !tx->done() : sent < slen; };
  auto sender_failed = [&] {
    std::string why = sender->join();
    if (mesh_.aborted()) mesh_.check_abort(during);
    if (why == "timeout")
      mesh_.fail(during, next, mesh_.who(next) + " did not answer within " + std::to_string(mesh_.timeout().count()) +
                             " ms (hung, stopped or unreachable; raise SAKER_COMM_TIMEOUT if it is only slow)");
    mesh_.fail(during, next, mesh_.who(next) + " failed while we were sending: " + why + " (it exited or was killed)");
  };
  std::size_t sender_seen = 0;
  auto deadline = net::deadline_in(mesh_.timeout());
  const bool busy_poll = slen + rlen <= plan_.busy_poll_bytes;
  net::Clock::time_point idle_since{};
  while (sending() || got < rlen) {
    bool progress = false;
    std::size_t send_limit = forward ? std::min(got, slen) : slen;
    if (tx ? sending() : sent < send_limit) {
      ssize_t k = tx ? tx->pump(sfd, send_limit)
                     : ::send(sfd, sp + sent, std::min(send_limit - sent, chunk), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) { sent += static_cast<std::size_t>(k); progress = true; }
      else if (k < 0 && errno != EAGAIN && errno != EINTR)
        mesh_.fail(during, next, mesh_.who(next) + " failed while we were sending: " + std::strerror(errno) +
                               " (it exited or was killed)");
    }
    if (got < rlen) {
      std::size_t in_chunk = got % chunk;
      ssize_t k = rx       ? open_arrived(mesh_, *rx, rfd, on_chunk, during)
                  : staged ? ::recv(rfd, rp + in_chunk, std::min(rlen - got, chunk - in_chunk), MSG_DONTWAIT)
                           : ::recv(rfd, rp + got, std::min(rlen - got, chunk), MSG_DONTWAIT);
      if (k > 0) { got = rx ? rx->got() : got + static_cast<std::size_t>(k); progress = true; }
      else if (k == 0)
        mesh_.fail(during, prev, mesh_.who(prev) + " closed the connection while we were receiving (it exited or was killed)");
      else if (errno != EAGAIN && errno != EINTR)
        mesh_.fail(during, prev, mesh_.who(prev) + " failed while we were receiving: " + std::strerror(errno));
      // Reduce every whole chunk that has arrived while later ones are in flight (the
      // receiver does so for sealed frames, once each has been opened).
      std::size_t ready = got == rlen ? got : got / chunk * chunk;
      if (!rx && on_chunk && ready > reduced) {
        on_chunk(reduced, ready - reduced);
        reduced = ready;
      }
    }
    if (sender && sender->failed()) sender_failed();
    if (progress) {
      deadline = net::deadline_in(mesh_.timeout());
      idle_since = {};
      continue;
    }
    if (busy_poll) {
      auto now = net::Clock::now();
      if (idle_since == net::Clock::time_point{}) idle_since = now;
      if (now - idle_since < kBusyPoll) {
        mesh_.check_abort(during);
        sched_yield();
        continue;
      }
    }
    if (sender && sender->sent() != sender_seen) {
      sender_seen = sender->sent();
      deadline = net::deadline_in(mesh_.timeout());
    }
    pollfd fds[3];
    int nf = 0;
    if (tx ? !sender && tx->can_send(send_limit) : sent < send_limit) fds[nf++] = {sfd, POLLOUT, 0};
    if (got < rlen) fds[nf++] = {rfd, POLLIN, 0};
    fds[nf++] = {mesh_.abort_fd(), POLLIN, 0};
    poll(fds, static_cast<nfds_t>(nf), net::poll_ms(deadline));
    mesh_.check_abort(during);
    if (net::Clock::now() >= deadline) {
      int culprit = got < rlen ? prev : next;
      mesh_.fail(during, culprit, mesh_.who(culprit) + " did not answer within " + std::to_string(mesh_.timeout().count()) +
                             " ms (hung, stopped or unreachable; raise SAKER_COMM_TIMEOUT if it is only slow)");
    }
  }
  if (sender) {
    // Received everything; the rest of our send is in the kernel or about to be.
    if (sender->failed() || !sender->join().empty()) sender_failed();
  }
}

void Ring::allreduce(void* data, std::size_t count, DataType type, ReduceOp op, std::vector<std::size_t> seg) {
  int n = size();
  if (n == 1 || count == 0) return;
  if (seg.empty()) seg = even_split(count, n);
  SAKER_ASSERT(seg.size() == static_cast<std::size_t>(n) + 1 && seg.back() == count, "bad ring segments");
  if (!agreed_) agree();
  // Every member has the same limits (calibrate() agrees on them), so every member
  // takes the same path; all three give the same bits.
  std::size_t bytes = count * size_of(type);
  if (exchange_fits(n, bytes) && bytes <= plan_.exchange_bytes) allreduce_exchange(static_cast<char*>(data), seg, type, op);
  else if (bytes <= plan_.direct_bytes) allreduce_direct(static_cast<char*>(data), seg, type, op);
  else allreduce_ring(static_cast<char*>(data), seg, type, op);
}

void Ring::allreduce_ring(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type);
  std::size_t chunk = std::max(es, chunk_ / es * es);  // exchange()'s chunk: the staging size
  if (tmp_.size() < chunk) tmp_.resize(chunk);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  // Blocks: a buffer larger than block_bytes runs as several whole rings, block b taking
  // the b-th of `blocks` even parts of every segment. An element stays in its segment,
  // so it is reduced in the same order whatever the number of blocks (bitwise the same
  // result); what changes is that a block's reduced half is sent on while it is still
  // in cache, instead of after the whole buffer has streamed through it.
  const std::size_t total = seg.back() * es;
  const std::size_t blocks =
      plan_.block_bytes == 0 ? 1 : std::max<std::size_t>(1, (total + plan_.block_bytes - 1) / plan_.block_bytes);
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    auto part = [&](int s, std::size_t i) {  // element offset of part i of segment s
      std::size_t b = seg[static_cast<std::size_t>(s)], c = seg[static_cast<std::size_t>(s) + 1] - b;
      return b + c * i / blocks;
    };
    auto at = [&](int s) { return base + part(s, blk) * es; };
    auto len = [&](int s) { return (part(s, blk + 1) - part(s, blk)) * es; };
    // The same on every member (segments may differ by an element): the send thread's key.
    const std::size_t step = (total * (blk + 1) / blocks - total * blk / blocks) / static_cast<std::size_t>(n);
    // Reduce-scatter: after n-1 steps this rank holds the full result of segment index+1.
    // Segment s is reduced along the ring from rank s: acc = x[s], then at each rank
    // s+k, acc = x[s+k] op acc; allreduce_direct() repeats exactly this order.
    bool threaded = send_thread_for(kReduceScatter, step);
    auto started = net::Clock::now();
    for (int s = 0; s < n - 1; ++s) {
      int send_seg = mod(index_ - s), recv_seg = mod(index_ - s - 1);
      char* dst = at(recv_seg);
      exchange(at(send_seg), len(send_seg), tmp_.data(), len(recv_seg), es,
               [&](std::size_t off, std::size_t l) { reduce::accumulate(dst + off, tmp_.data(), l / es, type, op); },
               false, "allreduce", threaded, /*staged=*/true);
    }
    record_phase(kReduceScatter, step, threaded, started);
    // Allgather: pass the finished segments around.
    threaded = send_thread_for(kAllgather, step);
    started = net::Clock::now();
    for (int s = 0; s < n - 1; ++s) {
      int send_seg = mod(index_ - s + 1), recv_seg = mod(index_ - s);
      exchange(at(send_seg), len(send_seg), at(recv_seg), len(recv_seg), es, nullptr, false, "allreduce", threaded);
    }
    record_phase(kAllgather, step, threaded, started);
  }
}

void Ring::allreduce_direct(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto at = [&](int s) { return base + seg[static_cast<std::size_t>(s)] * es; };
  auto len = [&](int s) { return (seg[static_cast<std::size_t>(s) + 1] - seg[static_cast<std::size_t>(s)]) * es; };
  // This rank owns segment index+1 (as after the ring's reduce-scatter); member j
  // owns segment j+1 and receives it from everyone.
  const int mine = mod(index_ + 1);
  const std::size_t piece = len(mine);
  if (tmp_.size() < piece * static_cast<std::size_t>(n)) tmp_.resize(piece * static_cast<std::size_t>(n));
  auto slot = [&](int j) { return tmp_.data() + static_cast<std::size_t>(j) * piece; };  // member j's piece of mine
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, at(mod(j + 1)), len(mod(j + 1)), slot(j), piece});
  exchange_all(xs, "allreduce");
  // The ring's order for segment `mine`: start at member `mine`, then each next member
  // folds its own term in front (accumulate(dst = its term, in = the partial)); the
  // last one is this rank, whose term sits in place.
  std::size_t count = piece / es;
  if (count > 0) {
    char* acc = slot(mine);
    for (int k = 1; k < n - 1; ++k) {
      char* term = slot(mod(mine + k));
      reduce::accumulate(term, acc, count, type, op);
      acc = term;
    }
    reduce::accumulate(at(mine), acc, count, type, op);
  }
  xs.clear();
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, at(mine), piece, at(mod(j + 1)), len(mod(j + 1))});
  exchange_all(xs, "allreduce");
}

void Ring::allreduce_exchange(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type), bytes = seg.back() * es;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  if (tmp_.size() < bytes * static_cast<std::size_t>(n)) tmp_.resize(bytes * static_cast<std::size_t>(n));
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, base, bytes, tmp_.data() + static_cast<std::size_t>(j) * bytes, bytes});
  exchange_all(xs, "allreduce");
  // Member j's term of element i: in place for this rank, else in j's slot.
  auto term = [&](int j, std::size_t elem) {
    return (j == index_ ? base : tmp_.data() + static_cast<std::size_t>(j) * bytes) + elem * es;
  };
  for (int s = 0; s < n; ++s) {
    std::size_t first = seg[static_cast<std::size_t>(s)], count = seg[static_cast<std::size_t>(s) + 1] - first;
    if (count == 0) continue;
    // The ring's order for segment s (see allreduce_ring): x[s], then x[s+k] op that.
    char* acc = term(s, first);
    for (int k = 1; k < n; ++k) {
      char* t = term(mod(s + k), first);
      reduce::accumulate(t, acc, count, type, op);
      acc = t;
    }
    if (acc != base + first * es) std::memcpy(base + first * es, acc, count * es);
  }
}

void Ring::exchange_all(std::vector<Transfer>& xs, const char* during) {
  std::vector<int> sfds, rfds;
  std::vector<aead::Drain> drains(xs.size());  // however this ends, no helper is left on our buffers
  for (Transfer& x : xs) {
    const int sch = channel_between(index_, x.index), rch = channel_between(x.index, index_);
    sfds.push_back(x.slen > 0 ? mesh_.link(x.peer, sch) : -1);
    rfds.push_back(x.rlen > 0 ? mesh_.link(x.peer, rch) : -1);
    // Transit::encrypt: sealed frames of up to a chunk; sent counts wire bytes then.
    if (ciphers_ && x.slen > 0) (x.tx = &ciphers_->sender(x.peer, sch))->start(x.send, x.slen, chunk_);
    if (ciphers_ && x.rlen > 0) (x.rx = &ciphers_->receiver(x.peer, rch))->start(x.recv, x.rlen, aead::kMaxFrame, 1, false);
    drains[sfds.size() - 1].tx = x.tx;
    drains[sfds.size() - 1].rx = x.rx;
  }
  auto sending = [](const Transfer& x) { return x.tx ? !x.tx->done() : x.sent < x.slen; };
  std::size_t total = 0;
  for (const Transfer& x : xs) total += x.slen + x.rlen;
  const bool busy_poll = total <= plan_.busy_poll_bytes;
  auto deadline = net::deadline_in(mesh_.timeout());
  net::Clock::time_point idle_since{};
  std::vector<pollfd> pfds;
  while (true) {
    bool progress = false, done = true;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      Transfer& x = xs[i];
      if (sending(x)) {
        ssize_t k = x.tx ? x.tx->pump(sfds[i], x.slen) : ::send(sfds[i], x.send + x.sent, x.slen - x.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) { x.sent += static_cast<std::size_t>(k); progress = true; }
        else if (k < 0 && errno != EAGAIN && errno != EINTR)
          mesh_.fail(during, x.peer, mesh_.who(x.peer) + " failed while we were sending: " + std::strerror(errno) +
                                       " (it exited or was killed)");
      }
      if (x.got < x.rlen) {
        ssize_t k = x.rx ? open_arrived(mesh_, *x.rx, rfds[i], nullptr, during) : ::recv(rfds[i], x.recv + x.got, x.rlen - x.got, MSG_DONTWAIT);
        if (k > 0) { x.got = x.rx ? x.rx->got() : x.got + static_cast<std::size_t>(k); progress = true; }
        else if (k == 0)
          mesh_.fail(during, x.peer, mesh_.who(x.peer) + " closed the connection while we were receiving (it exited or was killed)");
        else if (errno != EAGAIN && errno != EINTR)
          mesh_.fail(during, x.peer, mesh_.who(x.peer) + " failed while we were receiving: " + std::strerror(errno));
      }
      done = done && !sending(x) && x.got == x.rlen;
    }
    if (done) return;
    if (progress) {
      deadline = net::deadline_in(mesh_.timeout());
      idle_since = {};
      continue;
    }
    auto now = net::Clock::now();
    if (idle_since == net::Clock::time_point{}) idle_since = now;
    if (busy_poll && now - idle_since < kBusyPoll) {
      mesh_.check_abort(during);
      sched_yield();
      continue;
    }
    pfds.clear();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (sending(xs[i])) pfds.push_back({sfds[i], POLLOUT, 0});
      if (xs[i].got < xs[i].rlen) pfds.push_back({rfds[i], POLLIN, 0});
    }
    pfds.push_back({mesh_.abort_fd(), POLLIN, 0});
    poll(pfds.data(), static_cast<nfds_t>(pfds.size()), net::poll_ms(deadline));
    mesh_.check_abort(during);
    if (net::Clock::now() >= deadline) {
      for (const Transfer& x : xs)
        if (x.got < x.rlen || sending(x))
          mesh_.fail(during, x.peer, mesh_.who(x.peer) + " did not answer within " + std::to_string(mesh_.timeout().count()) +
                                       " ms (hung, stopped or unreachable; raise SAKER_COMM_TIMEOUT if it is only slow)");
    }
  }
}

void Ring::agree() {
  agreed_ = true;
  // Every member must cut a buffer into the same blocks: the smallest block wins (8
  // bytes: one block whatever the plans say, so this allreduce needs no agreement).
  double block = static_cast<double>(plan_.block_bytes);
  allreduce_ring(reinterpret_cast<char*>(&block), even_split(1, size()), DataType::f64, ReduceOp::min);
  plan_.block_bytes = static_cast<std::size_t>(block);
  if (plan_.direct_bytes == LinkPlan::kCalibrate || plan_.exchange_bytes == LinkPlan::kCalibrate) calibrate();
}

void Ring::calibrate() {
  int n = size();
  constexpr std::size_t kSizes = std::size(kCalibrationSizes);
  constexpr std::size_t kAlgos = 3;  // ring, direct, exchange
  // times[kAlgos*i + a]: this rank's median of kCalibrationReps (1e30: not tried).
  std::vector<double> times(kAlgos * kSizes, 1e30);
  std::vector<float> buf(kCalibrationSizes[kSizes - 1] / sizeof(float), 0.0f);
  char* p = reinterpret_cast<char*>(buf.data());
  auto call = [&](std::size_t a, std::size_t bytes) {
    auto seg = even_split(bytes / sizeof(float), n);
    auto t0 = net::Clock::now();
    if (a == 0) allreduce_ring(p, seg, DataType::f32, ReduceOp::sum);
    else if (a == 1) allreduce_direct(p, seg, DataType::f32, ReduceOp::sum);
    else allreduce_exchange(p, seg, DataType::f32, ReduceOp::sum);
    return std::chrono::duration<double>(net::Clock::now() - t0).count();
  };
  // Untimed first: the ring's sockets (one per direction with two ranks) are new and
  // their buffers have not grown yet, and the staging buffers are not yet touched.
  // Timed cold, the ring lost at 1 MiB in about half of all starts here, and the
  // exchange it handed 1 MiB to then ran 2.2x slower than the ring for good.
  for (int warm = 0; warm < 2; ++warm)
    for (std::size_t a = 0; a < kAlgos; ++a)
      if (a != 2 || exchange_fits(n, kCalibrationSizes[kSizes - 1])) call(a, kCalibrationSizes[kSizes - 1]);
  for (std::size_t i = 0; i < kSizes; ++i) {
    std::vector<double> reps[kAlgos];
    for (int rep = 0; rep < kCalibrationReps; ++rep)
      for (std::size_t a = 0; a < kAlgos; ++a)
        if (a != 2 || exchange_fits(n, kCalibrationSizes[i])) reps[a].push_back(call(a, kCalibrationSizes[i]));
    for (std::size_t a = 0; a < kAlgos; ++a)
      if (!reps[a].empty()) {
        std::nth_element(reps[a].begin(), reps[a].begin() + kCalibrationReps / 2, reps[a].end());
        times[kAlgos * i + a] = reps[a][kCalibrationReps / 2];
      }
  }
  // Agree: the slowest member's times decide (the ring algorithm, whatever the plan).
  allreduce_ring(reinterpret_cast<char*>(times.data()), even_split(times.size(), n), DataType::f64, ReduceOp::max);
  // Each small algorithm serves the calibrated sizes up to the first where it lost:
  // the exchange while it beats both others, the direct one while it beats the ring.
  auto t = [&](std::size_t i, std::size_t a) { return times[kAlgos * i + a]; };
  plan_.exchange_bytes = 0;
  for (std::size_t i = 0; i < kSizes && t(i, 2) <= std::min(t(i, 0), t(i, 1)); ++i) plan_.exchange_bytes = kCalibrationSizes[i];
  plan_.direct_bytes = 0;
  for (std::size_t i = 0; i < kSizes && (kCalibrationSizes[i] <= plan_.exchange_bytes || t(i, 1) <= t(i, 0)); ++i)
    plan_.direct_bytes = kCalibrationSizes[i];
}

void Ring::allgather(const void* send, void* recv, std::size_t bytes) {
  int n = size();
  char* out = static_cast<char*>(recv);
  if (out + static_cast<std::size_t>(index_) * bytes != send)
    std::memmove(out + static_cast<std::size_t>(index_) * bytes, send, bytes);
  if (n == 1) return;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  const bool threaded = send_thread_for(kAllgather, bytes);
  const auto started = net::Clock::now();
  for (int s = 0; s < n - 1; ++s) {
    std::size_t send_slot = static_cast<std::size_t>(mod(index_ - s)), recv_slot = static_cast<std::size_t>(mod(index_ - s - 1));
    exchange(out + send_slot * bytes, bytes, out + recv_slot * bytes, bytes, 1, nullptr, false, "allgather", threaded);
  }
  record_phase(kAllgather, bytes, threaded, started);
}

void Ring::broadcast(void* data, std::size_t bytes, int root_index) {
  int n = size();
  if (n == 1 || bytes == 0) return;
  int pos = ((index_ - root_index) % n + n) % n;  // distance from the root along the ring
  bool sends = pos < n - 1, receives = pos > 0;
  exchange(data, sends ? bytes : 0, data, receives ? bytes : 0, 1, nullptr, receives, "broadcast", /*threaded=*/false);
}

void Ring::barrier() {
  std::vector<char> flags(static_cast<std::size_t>(size()), 1);
  char mine = 1;
  allgather(&mine, flags.data(), 1);
}

}  // namespace saker::comm
