// Point-to-point links between ranks, opened lazily, plus failure propagation.
//
// Each rank listens on one port (published through the store at bootstrap). A link
// (peer, channel) is opened by the lower rank; a listener thread accepts links and
// abort notices. When a rank sees a peer fail it sends every other rank a notice
// naming the culprit, so that ranks far from the failure report the real cause (the
// dead rank and its host) instead of blaming a neighbour.
#pragma once

#include <atomic>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/comm/auth.hpp"
#include "launcher/comm/net.hpp"

namespace saker::comm {

struct PeerInfo {
  std::string address;  // where its listener is reachable
  int port = 0;
  std::string host;  // shown in errors
  std::string node;  // node identity (shared /dev/shm)
  int pid = 0;
  std::string machine;  // kernel boot id: ranks with the same one share CPUs
};

// Every connection (link, abort notice, ping) runs the job-key handshake (auth.hpp)
// before any other byte is believed; one that fails is dropped and logged, and the job
// goes on. The listener thread drives every handshake itself, step by step as bytes
// arrive (no thread per connection), so a stranger who stalls, silent or after a replayed
// Hello, holds one place in a bounded table and nothing else; a full table drops the
// oldest unproven connection of the host that holds the most (admission.hpp).
class Mesh {
 public:
  // auth: the job key and scope; std::nullopt for Transit::off (no handshake at all).
  Mesh(int rank, std::vector<PeerInfo> peers, net::Fd listener, std::chrono::milliseconds timeout,
       std::optional<auth::Context> auth);
  ~Mesh();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  const PeerInfo& peer(int r) const { return peers_[static_cast<std::size_t>(r)]; }
  std::string who(int r) const;  // "rank 3 (host node7)"
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The socket to peer on this channel (blocking until it exists, bounded by timeout).
  int link(int peer, int channel);
  // The per-direction keys its handshake derived (all zero under Transit::off). Valid
  // once link(peer, channel) returned, for the Mesh's lifetime.
  const auth::LinkKeys& link_keys(int peer, int channel) const;
  // Longest an incoming handshake may take before the stranger is dropped.
  static constexpr std::chrono::milliseconds kHandshakeLimit{10000};
  // Longest abort text believed (longer notices are refused, not cut).
  static constexpr std::uint32_t kMaxAbortText = 4096;

  // Readable once an abort notice arrived; include it in poll sets.
  int abort_fd() const { return abort_event_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_reason() const;
  // A local failure while talking to `suspect`: prefer a notice that names the real
  // culprit, otherwise tell everyone ours. A suspect whose process still answers a ping
  // is alive and blocked behind someone else (a hung rank's neighbours all time out at
  // once), so then we wait for the notice of the rank that really saw the failure.
  // Always throws.
  [[noreturn]] void fail(const std::string& during, int suspect, const std::string& local_reason);
  // A failure this rank is sure of (a peer's frame failed its authentication, aead.hpp):
  // tells every other rank at once, without pinging or waiting, then throws.
  [[noreturn]] void fail_here(const std::string& during, const std::string& local_reason);
  // Throws the abort reason if one arrived.
  void check_abort(const std::string& during) const;

 private:
  // An accepted connection that has not proved the job key yet, or, once it has, whose
  // abort notice is still arriving. listen_loop reads exactly the bytes of its current
  // step (wanted()) and advances it (on_step()); it costs a descriptor and this entry.
  struct Pending {
    net::Fd fd;
    net::Deadline until;  // the whole exchange: handshake and abort text
    std::string address;  // auth::peer_address at accept, for logs and make_room's fairness
    std::string in;       // the bytes of the step under way
    std::unique_ptr<auth::ServerSide> handshake;  // its Hello passed: it owes the Finish
    bool proven = false;                          // the claim is believed
    bool has_length = false;                      // an abort notice's length arrived
    std::uint32_t abort_length = 0;
    auth::Claim claim;
    auth::LinkKeys keys{};
  };
  void listen_loop();
  void accept_pending(std::deque<Pending>& pending);
  void make_room(std::deque<Pending>& pending);
  void expire(std::deque<Pending>& pending);
  // Reads what p's step still lacks and advances it; false: p is done (handed over,
  // answered or dropped).
  bool feed(Pending& p);
  std::size_t wanted(const Pending& p) const;
  bool on_step(Pending& p);      // p.in holds the whole step; throws to drop p
  bool on_hello(Pending& p);     // the claim (and under a key, the challenge sent)
  bool deliver(Pending& p);      // a proven connection: link, ping or abort notice
  void record_abort(const std::string& text);
  // Client half of a connection to peer: connect, handshake, claim kind on channel.
  net::Fd open_to(int peer, auth::Kind kind, int channel, net::Deadline d, auth::LinkKeys* keys) const;
  void notify_all(const std::string& reason);
  // Whether peer's listener answers within the deadline (its process runs).
  bool answers_ping(int peer, std::chrono::milliseconds within) const;

  int rank_;
  std::vector<PeerInfo> peers_;
  net::Fd listener_;
  std::chrono::milliseconds timeout_;
  int wake_[2] = {-1, -1};
  int abort_event_ = -1;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, net::Fd> links_;
  std::map<std::pair<int, int>, std::unique_ptr<auth::LinkKeys>> link_keys_;  // stable addresses
  std::optional<auth::Context> auth_;
  std::string abort_reason_;
  bool notified_ = false;
  std::thread listener_thread_;
};

}  // namespace saker::comm
