#include "launcher/comm/mesh.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <deque>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/comm/admission.hpp"

namespace saker::comm {
namespace {

bool mesh_kind(auth::Kind k) { return k == auth::Kind::link || k == auth::Kind::abort || k == auth::Kind::ping; }

// Handshakes in flight at once (a thread each), for connections whose Hello arrived.
constexpr std::size_t kMaxHandshakes = 64;
// Accepted connections still waiting for their Hello. A full list makes room by dropping
// its oldest silent member, so a stranger that connects and says nothing can delay no
// rank: every connection leaves the kernel's backlog at once, and a rank's Hello follows
// its connect immediately (issue 28: 64 silent connections used to hold every slot for
// the handshake deadline while the real peer waited in the backlog, and those behind
// a full backlog had their connects dropped).
constexpr std::size_t kMaxPending = 256;

// Bytes waiting to be read on fd (0 on error).
std::size_t readable(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? static_cast<std::size_t>(n) : 0;
}

}  // namespace

Mesh::Mesh(int rank, std::vector<PeerInfo> peers, net::Fd listener, std::chrono::milliseconds timeout,
           std::optional<auth::Context> auth)
    : rank_(rank), peers_(std::move(peers)), listener_(std::move(listener)), timeout_(timeout), auth_(std::move(auth)) {
  if (pipe2(wake_, O_CLOEXEC) != 0) throw Error("saker: cannot create a pipe for the link listener");
  abort_event_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Non-blocking, so that listen_loop drains the backlog in one go (accept_pending).
  fcntl(listener_.get(), F_SETFL, fcntl(listener_.get(), F_GETFL) | O_NONBLOCK);
  listener_thread_ = std::thread([this] { listen_loop(); });
}

Mesh::~Mesh() {
  char c = 1;
  if (write(wake_[1], &c, 1) < 0) {}
  listener_thread_.join();
  reap_handlers(true);
  close(wake_[0]);
  close(wake_[1]);
  close(abort_event_);
}

std::string Mesh::who(int r) const {
  return "rank " + std::to_string(r) + " (host " + peers_[static_cast<std::size_t>(r)].host + ")";
}

// Joins finished handlers; all: first ends the running ones (their sockets shut down).
void Mesh::reap_handlers(bool all) {
  std::vector<std::unique_ptr<Handler>> done;
  {
    std::lock_guard lock(handlers_mu_);
    for (auto& h : handlers_)
      if (all && h->fd >= 0) shutdown(h->fd, SHUT_RDWR);
    auto mid = std::stable_partition(handlers_.begin(), handlers_.end(), [&](const auto& h) { return !all && h->fd >= 0; });
    for (auto it = mid; it != handlers_.end(); ++it) done.push_back(std::move(*it));
    handlers_.erase(mid, handlers_.end());
  }
  for (auto& h : done) h->thread.join();
}

void Mesh::listen_loop() {
  std::deque<Pending> pending;
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    // A connection with part of a Hello is not polled for input (it would wake this loop
    // at once, over and over); the next round looks at it again, and a Hello comes whole.
    for (auto& p : pending)
      fds.push_back({p.fd.get(), static_cast<short>(POLLRDHUP | (readable(p.fd.get()) ? 0 : POLLIN)), 0});
    if (poll(fds.data(), fds.size(), 100) < 0) continue;
    if (fds[0].revents) return;
    reap_handlers(false);
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const short r = fds[i + 2].revents;
      if ((r & (POLLHUP | POLLERR | POLLRDHUP)) || ((r & POLLIN) && !readable(pending[i].fd.get())))
        pending[i].hung_up = true;
    }
    if (fds[1].revents & POLLIN) accept_pending(pending);
    start_handshakes(pending);
  }
}

// Takes every connection the kernel holds (the listener is non-blocking), making room
// in a full list by dropping its oldest member that has not sent a whole Hello.
void Mesh::accept_pending(std::deque<Pending>& pending) {
  for (int taken = 0; taken < 1024; ++taken) {
    net::Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EMFILE && errno != ENFILE) return;  // none left (EAGAIN)
      // Out of descriptors: a silent stranger's goes, or the next round tries again.
      if (pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      else make_room(pending);
      return;
    }
    if (pending.size() >= kMaxPending) make_room(pending);
    std::string address = auth::peer_address(fd.get());
    pending.push_back({std::move(fd), net::deadline_in(std::min(timeout_, kHandshakeLimit)), false, std::move(address)});
  }
}

// Drops a pending connection that has not sent a whole Hello: the oldest of the host
// holding the most (admission.hpp); else the oldest.
void Mesh::make_room(std::deque<Pending>& pending) {
  std::vector<std::size_t> silent;
  std::vector<std::string_view> hosts;
  for (std::size_t i = 0; i < pending.size(); ++i)
    if (readable(pending[i].fd.get()) < auth::kHelloBytes) {
      silent.push_back(i);
      hosts.push_back(admission::host_of(pending[i].address));
    }
  auto v = admission::victim(hosts);
  auto gone = pending.begin() + static_cast<long>(v ? silent[*v] : 0);
  auth::log_refused(who(rank_) + "'s link listener", gone->address,
                    "it sent no handshake while newer connections needed its place");
  pending.erase(gone);
}

// A connection whose Hello has arrived gets a handler thread, while fewer than
// kMaxHandshakes run; one that hung up or outlived the handshake deadline is dropped.
void Mesh::start_handshakes(std::deque<Pending>& pending) {
  const auto now = net::Clock::now();
  for (auto it = pending.begin(); it != pending.end();) {
    const std::size_t ready = readable(it->fd.get());
    if (ready < auth::kHelloBytes && (it->hung_up || now >= it->until)) {
      auth::log_refused(who(rank_) + "'s link listener", it->address,
                        it->hung_up ? "it hung up before its handshake" : "it sent no handshake in time");
      it = pending.erase(it);
      continue;
    }
    if (ready < auth::kHelloBytes) {
      ++it;
      continue;
    }
    std::lock_guard lock(handlers_mu_);
    if (handlers_.size() >= kMaxHandshakes) return;  // the rest wait for a free handler
    auto h = std::make_unique<Handler>();
    Handler* raw = h.get();
    raw->fd = it->fd.get();
    raw->thread = std::thread([this, raw, f = it->fd.release()] {
      net::Fd owned(f);
      serve_incoming(owned);
      std::lock_guard l(handlers_mu_);
      raw->fd = -1;  // before owned closes: the destructor never shuts down a reused number
    });
    handlers_.push_back(std::move(h));
    it = pending.erase(it);
  }
}

// The handshake, then what the peer came for. A connection that fails is dropped and
// logged (rate-limited, with its address); nothing it sent reaches the job.
void Mesh::serve_incoming(net::Fd& fd) {
  const std::string address = auth::peer_address(fd.get());
  const std::string what = "a connecting peer at " + address;
  auth::Claim claim;
  auth::LinkKeys keys{};
  std::string text;
  try {
    auto d = net::deadline_in(std::min(timeout_, kHandshakeLimit));
    if (auth_) {
      auto a = auth::accept_handshake(fd.get(), *auth_, rank_, size(), mesh_kind, d, what);
      claim = a.claim;
      keys = a.keys;
    } else {
      claim = auth::recv_claim(fd.get(), size(), d, what);
      if (!mesh_kind(claim.kind) || claim.server_rank != rank_) throw auth::Refused("not a connection for this rank");
    }
    // Links are opened by the lower rank (link()), so a higher one never offers one.
    if (claim.client_rank < 0 || claim.client_rank == rank_ || (claim.kind == auth::Kind::link && claim.client_rank > rank_))
      throw auth::Refused("it claims rank " + std::to_string(claim.client_rank) + " for a " + auth::name_of(claim.kind) +
                          " connection to rank " + std::to_string(rank_));
    if (claim.kind == auth::Kind::abort) {
      std::uint32_t len = 0;
      net::recv_all(fd.get(), &len, 4, d, what);
      if (len > kMaxAbortText)
        throw auth::Refused("its abort notice claims " + std::to_string(len) + " bytes (at most " +
                            std::to_string(kMaxAbortText) + ")");
      text.resize(len);
      net::recv_all(fd.get(), text.data(), len, d, what);
    }
  } catch (const Error& e) {  // Refused, or a stranger that went silent or hung up
    auth::log_refused(who(rank_) + "'s link listener", address, e.what());
    return;
  }
  if (claim.kind == auth::Kind::ping) {  // liveness probe from a rank deciding whom to blame
    const char pong = 1;
    if (::send(fd.get(), &pong, 1, MSG_NOSIGNAL) < 0) {}
    return;
  }
  std::lock_guard lock(mu_);
  if (claim.kind == auth::Kind::link) {
    net::tune_stream(fd.get());
    links_[{claim.client_rank, claim.channel}] = std::move(fd);
    link_keys_[{claim.client_rank, claim.channel}] = std::make_unique<auth::LinkKeys>(keys);
  } else if (claim.kind == auth::Kind::abort && !aborted_) {
    abort_reason_ = text;
    aborted_.store(true, std::memory_order_release);
    std::uint64_t one = 1;
    if (write(abort_event_, &one, sizeof one) < 0) {}
  }
  cv_.notify_all();
}

net::Fd Mesh::open_to(int peer, auth::Kind kind, int channel, net::Deadline d, auth::LinkKeys* keys) const {
  const PeerInfo& p = peers_[static_cast<std::size_t>(peer)];
  return auth::connect_authenticated(p.address, p.port, auth_ ? &*auth_ : nullptr, auth::Claim{kind, rank_, peer, channel},
                                     d, who(peer), keys);
}

const auth::LinkKeys& Mesh::link_keys(int peer, int channel) const {
  std::lock_guard lock(mu_);
  auto it = link_keys_.find({peer, channel});
  SAKER_ASSERT(it != link_keys_.end(), "link_keys() before link() returned");
  return *it->second;
}

int Mesh::link(int peer, int channel) {
  SAKER_ASSERT(peer != rank_ && peer >= 0 && peer < size(), "link to self or out of range");
  std::unique_lock lock(mu_);
  if (auto it = links_.find({peer, channel}); it != links_.end()) return it->second.get();
  if (rank_ < peer) {
    lock.unlock();
    auth::LinkKeys keys{};
    net::Fd fd = open_to(peer, auth::Kind::link, channel, net::deadline_in(timeout_), &keys);
    lock.lock();
    int raw = fd.get();
    links_[{peer, channel}] = std::move(fd);
    link_keys_[{peer, channel}] = std::make_unique<auth::LinkKeys>(keys);
    return raw;
  }
  if (!cv_.wait_for(lock, timeout_, [&] { return links_.count({peer, channel}) > 0 || aborted_; }))
    throw Error(explain(who(peer) + " did not connect within " + std::to_string(timeout_.count()) + " ms",
                        "it has not started, crashed, or cannot reach this host",
                        "check its output; set SAKER_COMM_ADDR if the host name resolves to an unreachable address"));
  if (aborted_) throw Error("saker: " + abort_reason_);
  return links_[{peer, channel}].get();
}

std::string Mesh::abort_reason() const {
  std::lock_guard lock(mu_);
  return abort_reason_;
}

void Mesh::check_abort(const std::string& during) const {
  if (aborted()) throw Error("saker: " + during + " aborted: " + abort_reason());
}

void Mesh::notify_all(const std::string& reason) {
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    try {
      auto d = net::deadline_in(std::chrono::milliseconds(300));
      net::Fd fd = open_to(r, auth::Kind::abort, 0, d, nullptr);
      std::string text = reason.substr(0, kMaxAbortText);
      auto len = static_cast<std::uint32_t>(text.size());
      net::send_all(fd.get(), &len, 4, d, who(r));
      net::send_all(fd.get(), text.data(), text.size(), d, who(r));
    } catch (const Error&) {
      // That rank is gone too; the others still get the notice.
    }
  }
}

bool Mesh::answers_ping(int peer, std::chrono::milliseconds within) const {
  try {
    auto d = net::deadline_in(within);
    net::Fd fd = open_to(peer, auth::Kind::ping, 0, d, nullptr);
    char pong = 0;
    net::recv_all(fd.get(), &pong, 1, d, who(peer));
    return pong == 1;
  } catch (const Error&) {
    return false;  // refused (exited), or no answer in time (stopped, hung host)
  }
}

void Mesh::fail(const std::string& during, int suspect, const std::string& local_reason) {
  std::unique_lock lock(mu_);
  // A neighbour of the real culprit may be reporting it right now: give its notice a
  // moment to arrive so that we name the dead rank, not the messenger.
  cv_.wait_for(lock, std::chrono::milliseconds(300), [&] { return aborted_.load(); });
  if (!aborted_ && !notified_) {
    lock.unlock();
    const auto probe = std::clamp(timeout_ / 2, std::chrono::milliseconds(200), std::chrono::milliseconds(1000));
    const bool alive = answers_ping(suspect, probe);
    lock.lock();
    // An alive suspect waits for someone else; the rank that waits for the real culprit
    // will find it unresponsive and tell everyone. Bounded: after one more timeout we
    // report our own view.
    if (alive) cv_.wait_for(lock, timeout_, [&] { return aborted_.load(); });
  }
  lock.unlock();
  fail_here(during, local_reason);
}

void Mesh::fail_here(const std::string& during, const std::string& local_reason) {
  std::unique_lock lock(mu_);
  if (aborted_) throw Error("saker: " + during + " aborted: " + abort_reason_);
  std::string reason = local_reason + " (seen by " + who(rank_) + ")";
  bool first = !notified_;
  notified_ = true;
  lock.unlock();
  if (first) notify_all(reason);
  throw Error("saker: " + during + " failed: " + reason);
}

}  // namespace saker::comm
