// Point-to-point links between ranks, opened lazily, plus failure propagation.
//
// Each rank listens on one port (published through the store at bootstrap). A link
// (peer, channel) is opened by the lower rank; a listener thread accepts links and
// abort notices. When a rank sees a peer fail it sends every other rank a notice
// naming the culprit, so that ranks far from the failure report the real cause (the
// dead rank and its host) instead of blaming a neighbour.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

class Mesh {
 public:
  Mesh(int rank, std::vector<PeerInfo> peers, net::Fd listener, std::chrono::milliseconds timeout);
  ~Mesh();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  const PeerInfo& peer(int r) const { return peers_[static_cast<std::size_t>(r)]; }
  std::string who(int r) const;  // "rank 3 (host node7)"
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The socket to peer on this channel (blocking until it exists, bounded by timeout).
  int link(int peer, int channel);

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
  // Throws the abort reason if one arrived.
  void check_abort(const std::string& during) const;

 private:
  void listen_loop();
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
  std::string abort_reason_;
  bool notified_ = false;
  std::thread listener_thread_;
};

}  // namespace saker::comm
