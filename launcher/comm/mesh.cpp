#include "launcher/comm/mesh.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string_view>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/comm/admission.hpp"

namespace saker::comm {
namespace {

bool mesh_kind(auth::Kind k) { return k == auth::Kind::link || k == auth::Kind::abort || k == auth::Kind::ping; }

// Accepted connections that have not yet proved the job key (silent, or in their
// handshake). A full table makes room by dropping one (make_room), so neither silent
// strangers nor copies of a Hello seen on the wire can delay a rank: every connection
// leaves the kernel's backlog at once, and none holds a thread (issue 28: 64 silent
// connections, later 64 replayed Hellos, used to hold every handshake thread for the
// handshake deadline while a real peer's connect and its liveness pings waited).
constexpr std::size_t kMaxPending = 256;

// Bytes waiting to be read on fd (0 on error).
std::size_t readable(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? static_cast<std::size_t>(n) : 0;
}

// A handshake message, an ack or a pong, all at once: a connection's send buffer is empty
// when they go, so a short send means a stranger that shrank its window; drop it.
void send_now(int fd, const void* data, std::size_t n) {
  if (::send(fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(n))
    throw auth::Refused("it does not take the listener's answer (" + std::to_string(n) + " bytes)");
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
  close(wake_[0]);
  close(wake_[1]);
  close(abort_event_);
}

std::string Mesh::who(int r) const {
  return "rank " + std::to_string(r) + " (host " + peers_[static_cast<std::size_t>(r)].host + ")";
}

void Mesh::listen_loop() {
  std::deque<Pending> pending;
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (auto& p : pending) fds.push_back({p.fd.get(), POLLIN | POLLRDHUP, 0});
    if (poll(fds.data(), fds.size(), 100) < 0) continue;
    if (fds[0].revents) return;
    // Those that sent something (or hung up) first, while their positions still match fds.
    for (std::size_t i = 0, j = 2; i < pending.size(); ++j) {
      if (fds[j].revents && !feed(pending[i])) pending.erase(pending.begin() + static_cast<long>(i));
      else ++i;
    }
    expire(pending);
    if (fds[1].revents & POLLIN) accept_pending(pending);
  }
}

// Takes every connection the kernel holds (the listener is non-blocking), making room
// in a full table first (make_room).
void Mesh::accept_pending(std::deque<Pending>& pending) {
  for (int taken = 0; taken < 1024; ++taken) {
    net::Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EMFILE && errno != ENFILE) return;  // none left (EAGAIN)
      // Out of descriptors: an unproven stranger's goes, or the next round tries again.
      if (pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      else make_room(pending);
      return;
    }
    if (pending.size() >= kMaxPending) make_room(pending);
    Pending p;
    p.address = auth::peer_address(fd.get());
    p.fd = std::move(fd);
    p.until = net::deadline_in(std::min(timeout_, kHandshakeLimit));
    pending.push_back(std::move(p));
  }
}

// Drops one connection that has not proved the key: one that has sent nothing yet if
// there is one (a rank sends its Hello right after connecting), else one in its
// handshake (a rank answers the challenge at once; a copy of a Hello seen on the wire
// never does). Among those, the oldest of the host that holds the most (admission.hpp),
// so a flood or a replayer on one host only ever pushes out its own connections.
void Mesh::make_room(std::deque<Pending>& pending) {
  for (bool silent_only : {true, false}) {
    std::vector<std::size_t> candidates;
    std::vector<std::string_view> hosts;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      const bool silent = !p.handshake && p.in.empty() && readable(p.fd.get()) == 0;
      if (p.proven || (silent_only && !silent)) continue;
      candidates.push_back(i);
      hosts.push_back(admission::host_of(p.address));
    }
    auto v = admission::victim(hosts);
    if (!v) continue;
    auto gone = pending.begin() + static_cast<long>(candidates[*v]);
    auth::log_refused(who(rank_) + "'s link listener", gone->address,
                      silent_only ? "it sent no handshake while newer connections needed its place"
                                  : "it did not finish its handshake while newer connections needed its place");
    pending.erase(gone);
    return;
  }
  pending.pop_front();  // all proven (abort notices arriving): the oldest
}

// Drops connections past their deadline (a whole handshake, or an abort notice).
void Mesh::expire(std::deque<Pending>& pending) {
  const auto now = net::Clock::now();
  std::erase_if(pending, [&](const Pending& p) {
    if (now < p.until) return false;
    auth::log_refused(who(rank_) + "'s link listener", p.address,
                      p.proven ? "its abort notice did not arrive in time" : "it did not finish its handshake in time");
    return true;
  });
}

std::size_t Mesh::wanted(const Pending& p) const {
  std::size_t step = auth::kHelloBytes;
  if (p.proven) step = p.has_length ? p.abort_length : 4;
  else if (p.handshake) step = auth::kFinishBytes;
  return step - std::min(step, p.in.size());
}

bool Mesh::feed(Pending& p) {
  try {
    char buf[kMaxAbortText];
    const std::size_t want = wanted(p);
    if (want > 0) {
      const ssize_t n = recv(p.fd.get(), buf, std::min(want, sizeof buf), MSG_DONTWAIT);
      if (n == 0) throw auth::Refused(p.proven ? "it hung up during its abort notice" : "it hung up before its handshake ended");
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
        throw auth::Refused(std::string("reading from it failed: ") + std::strerror(errno));
      }
      p.in.append(buf, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < want) return true;
    }
    return on_step(p);
  } catch (const Error& e) {  // Refused, or a socket error: nothing it sent reaches the job
    auth::log_refused(who(rank_) + "'s link listener", p.address, e.what());
    return false;
  }
}

// One whole step is in p.in: the Hello (or the bare claim), the Finish, or an abort
// notice's length or text. True while more is to come.
bool Mesh::on_step(Pending& p) {
  if (!p.proven && !p.handshake) return on_hello(p);
  if (!p.proven) {
    p.handshake->on_finish(reinterpret_cast<const unsigned char*>(p.in.data()));
    const char ack = 1;
    send_now(p.fd.get(), &ack, 1);
    p.keys = p.handshake->keys();
    p.handshake.reset();
    p.in.clear();
    p.proven = true;
    return deliver(p);
  }
  if (!p.has_length) {  // an abort notice: its length, then its text
    std::memcpy(&p.abort_length, p.in.data(), 4);
    if (p.abort_length > kMaxAbortText)
      throw auth::Refused("its abort notice claims " + std::to_string(p.abort_length) + " bytes (at most " +
                          std::to_string(kMaxAbortText) + ")");
    p.has_length = true;
    p.in.clear();
    if (p.abort_length > 0) return true;
  }
  record_abort(p.in);
  return false;
}

bool Mesh::on_hello(Pending& p) {
  const auto* hello = reinterpret_cast<const unsigned char*>(p.in.data());
  std::array<unsigned char, auth::kReplyBytes> reply{};
  if (auth_) {
    p.handshake = std::make_unique<auth::ServerSide>(*auth_, rank_, mesh_kind);
    reply = p.handshake->on_hello(hello, size());
    p.claim = p.handshake->claim();
  } else {
    p.claim = auth::parse_claim(hello, size());
    if (!mesh_kind(p.claim.kind) || p.claim.server_rank != rank_) throw auth::Refused("not a connection for this rank");
  }
  const auth::Claim& c = p.claim;
  // Links are opened by the lower rank (link()), so a higher one never offers one.
  if (c.client_rank < 0 || c.client_rank == rank_ || (c.kind == auth::Kind::link && c.client_rank > rank_))
    throw auth::Refused("it claims rank " + std::to_string(c.client_rank) + " for a " + auth::name_of(c.kind) +
                        " connection to rank " + std::to_string(rank_));
  p.in.clear();
  if (!auth_) {  // Transit::off: the claim is all there is
    p.proven = true;
    return deliver(p);
  }
  send_now(p.fd.get(), reply.data(), reply.size());
  return true;
}

bool Mesh::deliver(Pending& p) {
  if (p.claim.kind == auth::Kind::abort) return true;  // its notice follows
  if (p.claim.kind == auth::Kind::ping) {  // liveness probe from a rank deciding whom to blame
    const char pong = 1;
    if (::send(p.fd.get(), &pong, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {}
    return false;
  }
  net::tune_stream(p.fd.get());
  std::lock_guard lock(mu_);
  links_[{p.claim.client_rank, p.claim.channel}] = std::move(p.fd);
  link_keys_[{p.claim.client_rank, p.claim.channel}] = std::make_unique<auth::LinkKeys>(p.keys);
  cv_.notify_all();
  return false;
}

void Mesh::record_abort(const std::string& text) {
  std::lock_guard lock(mu_);
  if (!aborted_) {
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
