#include "launcher/comm/mesh.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::comm {
namespace {

constexpr std::uint32_t kMagic = 0x53414b52;  // "SAKR"
enum : std::uint32_t { kLink = 1, kAbort = 2, kPing = 3 };

struct Hello {
  std::uint32_t magic, kind;
  std::int32_t from, channel;
  std::uint32_t text_len;
};

}  // namespace

Mesh::Mesh(int rank, std::vector<PeerInfo> peers, net::Fd listener, std::chrono::milliseconds timeout)
    : rank_(rank), peers_(std::move(peers)), listener_(std::move(listener)), timeout_(timeout) {
  if (pipe2(wake_, O_CLOEXEC) != 0) throw Error("saker: cannot create a pipe for the link listener");
  abort_event_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
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
  while (true) {
    pollfd fds[2] = {{wake_[0], POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (poll(fds, 2, 1000) <= 0) continue;
    if (fds[0].revents) return;
    net::Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    Hello h{};
    std::string text;
    try {
      auto d = net::deadline_in(std::chrono::seconds(5));
      net::recv_all(fd.get(), &h, sizeof h, d, "a connecting peer");
      if (h.magic != kMagic || h.from < 0 || h.from >= size() || h.text_len > 65536) continue;
      text.resize(h.text_len);
      net::recv_all(fd.get(), text.data(), text.size(), d, "a connecting peer");
    } catch (const Error&) {
      continue;  // a half-open probe; the real peer will retry or time out
    }
    if (h.kind == kPing) {  // liveness probe from a rank deciding whom to blame
      const char pong = 1;
      if (::send(fd.get(), &pong, 1, MSG_NOSIGNAL) < 0) {}
      continue;
    }
    std::lock_guard lock(mu_);
    if (h.kind == kLink) {
      net::tune_stream(fd.get());
      links_[{h.from, h.channel}] = std::move(fd);
    } else if (h.kind == kAbort && !aborted_) {
      abort_reason_ = text;
      aborted_.store(true, std::memory_order_release);
      std::uint64_t one = 1;
      if (write(abort_event_, &one, sizeof one) < 0) {}
    }
    cv_.notify_all();
  }
}

int Mesh::link(int peer, int channel) {
  SAKER_ASSERT(peer != rank_ && peer >= 0 && peer < size(), "link to self or out of range");
  std::unique_lock lock(mu_);
  if (auto it = links_.find({peer, channel}); it != links_.end()) return it->second.get();
  if (rank_ < peer) {
    lock.unlock();
    const PeerInfo& p = peers_[static_cast<std::size_t>(peer)];
    auto d = net::deadline_in(timeout_);
    net::Fd fd = net::connect_to(p.address, p.port, d, who(peer));
    Hello h{kMagic, kLink, rank_, channel, 0};
    net::send_all(fd.get(), &h, sizeof h, d, who(peer));
    lock.lock();
    int raw = fd.get();
    links_[{peer, channel}] = std::move(fd);
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
      const PeerInfo& p = peers_[static_cast<std::size_t>(r)];
      auto d = net::deadline_in(std::chrono::milliseconds(300));
      net::Fd fd = net::connect_to(p.address, p.port, d, who(r));
      Hello h{kMagic, kAbort, rank_, 0, static_cast<std::uint32_t>(reason.size())};
      net::send_all(fd.get(), &h, sizeof h, d, who(r));
      net::send_all(fd.get(), reason.data(), reason.size(), d, who(r));
    } catch (const Error&) {
      // That rank is gone too; the others still get the notice.
    }
  }
}

bool Mesh::answers_ping(int peer, std::chrono::milliseconds within) const {
  try {
    const PeerInfo& p = peers_[static_cast<std::size_t>(peer)];
    auto d = net::deadline_in(within);
    net::Fd fd = net::connect_to(p.address, p.port, d, who(peer));
    Hello h{kMagic, kPing, rank_, 0, 0};
    net::send_all(fd.get(), &h, sizeof h, d, who(peer));
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
  if (aborted_) throw Error("saker: " + during + " aborted: " + abort_reason_);
  std::string reason = local_reason + " (seen by " + who(rank_) + ")";
  bool first = !notified_;
  notified_ = true;
  lock.unlock();
  if (first) notify_all(reason);
  throw Error("saker: " + during + " failed: " + reason);
}

}  // namespace saker::comm
