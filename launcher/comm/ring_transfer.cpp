// The ring's transfer loops: exchange() (send to the next member while receiving from the
// previous one, optionally with a send thread of its own) and exchange_all() (one
// transfer per peer, all at once), each over plain or sealed (Transit::encrypt) links,
// bounded by the communicator's timeout and failing the collective with the culprit.
#include "launcher/comm/ring.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <thread>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "launcher/comm/aead.hpp"

namespace saker::comm {

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

// What the timeout's end says of a peer.
std::string no_answer(const Mesh& mesh, int peer) {
  return mesh.who(peer) + " did not answer within " + std::to_string(mesh.timeout().count()) +
         " ms (hung, stopped or unreachable; raise SAKER_COMM_TIMEOUT if it is only slow)";
}

// One try at sending to `peer` without blocking: sealed frames up to `limit` (tx), else
// up to `step` plain bytes from base + sent, short of `limit`. Adds what went to `sent`
// and returns whether anything did; a broken link fails the collective.
bool send_some(Mesh& mesh, int fd, aead::SealedSender* tx, const char* base, std::size_t limit, std::size_t step,
               std::size_t& sent, const char* during, int peer) {
  ssize_t k = tx ? tx->pump(fd, limit) : ::send(fd, base + sent, std::min(limit - sent, step), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0) {
    sent += static_cast<std::size_t>(k);
    return true;
  }
  if (k < 0 && errno != EAGAIN && errno != EINTR)
    mesh.fail(during, peer, mesh.who(peer) + " failed while we were sending: " + std::strerror(errno) + " (it exited or was killed)");
  return false;
}

// One try at receiving from `peer` without blocking: opens the sealed frames that have
// arrived (rx; each goes to on_frame), else takes up to len plain bytes into p. Sets got
// to all that has arrived and returns whether anything did; a closed or broken link
// fails the collective.
bool receive_some(Mesh& mesh, int fd, aead::SealedReceiver* rx, const std::function<void(std::size_t, std::size_t)>& on_frame,
                  char* p, std::size_t len, std::size_t& got, const char* during, int peer) {
  ssize_t k = rx ? open_arrived(mesh, *rx, fd, on_frame, during) : ::recv(fd, p, len, MSG_DONTWAIT);
  if (k > 0) {
    got = rx ? rx->got() : got + static_cast<std::size_t>(k);
    return true;
  }
  if (k == 0) mesh.fail(during, peer, mesh.who(peer) + " closed the connection while we were receiving (it exited or was killed)");
  if (errno != EAGAIN && errno != EINTR)
    mesh.fail(during, peer, mesh.who(peer) + " failed while we were receiving: " + std::strerror(errno));
  return false;
}

// A transfer loop's patience: the timeout's deadline, renewed whenever bytes move, and
// for a small exchange the busy poll before it sleeps in poll().
class Patience {
 public:
  Patience(Mesh& mesh, bool busy_poll) : mesh_(mesh), busy_poll_(busy_poll), deadline_(net::deadline_in(mesh.timeout())) {}
  // Bytes moved: a new deadline, and a new busy poll once idle again.
  void moved() {
    renew();
    idle_since_ = {};
  }
  void renew() { deadline_ = net::deadline_in(mesh_.timeout()); }
  // After a try that moved nothing: a small exchange keeps the core (yielding it) until
  // kBusyPoll has passed since it went idle. Returns whether to try again at once.
  bool spin(const char* during) {
    if (!busy_poll_) return false;
    auto now = net::Clock::now();
    if (idle_since_ == net::Clock::time_point{}) idle_since_ = now;
    if (now - idle_since_ >= kBusyPoll) return false;
    mesh_.check_abort(during);
    sched_yield();
    return true;
  }
  int poll_ms() const { return net::poll_ms(deadline_); }
  bool over() const { return net::Clock::now() >= deadline_; }

 private:
  Mesh& mesh_;
  const bool busy_poll_;
  net::Deadline deadline_;
  net::Clock::time_point idle_since_{};
};

// The send thread gave up: a notice of the real culprit if one came, else the next member.
[[noreturn]] void send_thread_failed(Mesh& mesh, SendThread& sender, const char* during, int next) {
  std::string why = sender.join();
  if (mesh.aborted()) mesh.check_abort(during);
  if (why == "timeout") mesh.fail(during, next, no_answer(mesh, next));
  mesh.fail(during, next, mesh.who(next) + " failed while we were sending: " + why + " (it exited or was killed)");
}

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
  std::size_t sender_seen = 0;
  Patience patience(mesh_, slen + rlen <= plan_.busy_poll_bytes);
  while (sending() || got < rlen) {
    bool progress = false;
    std::size_t send_limit = forward ? std::min(got, slen) : slen;
    if (tx ? sending() : sent < send_limit) progress = send_some(mesh_, sfd, tx, sp, send_limit, chunk, sent, during, next);
    if (got < rlen) {
      // Staged: each chunk lands at rbuf, else at its place in rbuf.
      const std::size_t at = staged ? got % chunk : got;
      if (receive_some(mesh_, rfd, rx, on_chunk, rp + at, std::min(rlen - got, staged ? chunk - at : chunk), got, during, prev))
        progress = true;
      // Reduce every whole chunk that has arrived while later ones are in flight (the
      // receiver does so for sealed frames, once each has been opened).
      std::size_t ready = got == rlen ? got : got / chunk * chunk;
      if (!rx && on_chunk && ready > reduced) {
        on_chunk(reduced, ready - reduced);
        reduced = ready;
      }
    }
    if (sender && sender->failed()) send_thread_failed(mesh_, *sender, during, next);
    if (progress) {
      patience.moved();
      continue;
    }
    if (patience.spin(during)) continue;
    if (sender && sender->sent() != sender_seen) {
      sender_seen = sender->sent();
      patience.renew();
    }
    pollfd fds[3];
    int nf = 0;
    if (tx ? !sender && tx->can_send(send_limit) : sent < send_limit) fds[nf++] = {sfd, POLLOUT, 0};
    if (got < rlen) fds[nf++] = {rfd, POLLIN, 0};
    fds[nf++] = {mesh_.abort_fd(), POLLIN, 0};
    poll(fds, static_cast<nfds_t>(nf), patience.poll_ms());
    mesh_.check_abort(during);
    if (patience.over()) {
      int culprit = got < rlen ? prev : next;
      mesh_.fail(during, culprit, no_answer(mesh_, culprit));
    }
  }
  // Received everything; the rest of our send is in the kernel or about to be.
  if (sender && (sender->failed() || !sender->join().empty())) send_thread_failed(mesh_, *sender, during, next);
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
  Patience patience(mesh_, total <= plan_.busy_poll_bytes);
  std::vector<pollfd> pfds;
  while (true) {
    bool progress = false, done = true;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      Transfer& x = xs[i];
      if (sending(x) && send_some(mesh_, sfds[i], x.tx, x.send, x.slen, SIZE_MAX, x.sent, during, x.peer)) progress = true;
      if (x.got < x.rlen && receive_some(mesh_, rfds[i], x.rx, nullptr, x.recv + x.got, x.rlen - x.got, x.got, during, x.peer))
        progress = true;
      done = done && !sending(x) && x.got == x.rlen;
    }
    if (done) return;
    if (progress) {
      patience.moved();
      continue;
    }
    if (patience.spin(during)) continue;
    pfds.clear();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (sending(xs[i])) pfds.push_back({sfds[i], POLLOUT, 0});
      if (xs[i].got < xs[i].rlen) pfds.push_back({rfds[i], POLLIN, 0});
    }
    pfds.push_back({mesh_.abort_fd(), POLLIN, 0});
    poll(pfds.data(), static_cast<nfds_t>(pfds.size()), patience.poll_ms());
    mesh_.check_abort(during);
    if (patience.over()) {
      for (const Transfer& x : xs)
        if (x.got < x.rlen || sending(x))
          mesh_.fail(during, x.peer, no_answer(mesh_, x.peer));
    }
  }
}

}  // namespace saker::comm
