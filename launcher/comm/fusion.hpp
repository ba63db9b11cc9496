// Tensor fusion: named allreduces submitted in any order, matched by name across
// ranks by a background thread, packed into a fusion buffer and reduced together.
// Names submitted by some ranks and not others produce a stall report (which rank is
// missing which tensor), then fail. A rank that has joined (out of data) stands in for
// every name the others reduce, contributing the op's identity, until all have joined.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <string>
#include <vector>

#include "launcher/comm/impl.hpp"

namespace saker::comm {

class FusionEngine {
 public:
  explicit FusionEngine(Communicator::Impl& comm);
  ~FusionEngine();  // stops once every rank has asked to stop (bounded by the timeout)
  Handle enqueue(const std::string& name, void* data, std::size_t count, DataType type, ReduceOp op);
  // Blocks until every rank has joined; returns the rank that joined last (the
  // highest of those that joined in the same negotiation cycle).
  int join();

 private:
  struct Entry {
    void* data;
    std::size_t count;
    DataType type;
    ReduceOp op;
    std::shared_ptr<Handle::State> state;
  };
  // What a negotiation cycle found: no rank had anything (idle); a name that some ranks
  // submitted and others not yet (partial); or everything was reduced (settled).
  enum class Outcome { idle, partial, settled };
  void loop();
  Outcome cycle();
  void fail_all(std::exception_ptr e);
  void reduce_group(const std::vector<std::pair<std::string, Entry>>& group, Transport t);
  void track_joins(const std::vector<bool>& joined);

  Communicator::Impl& comm_;
  std::mutex mu_;
  std::map<std::string, Entry> pending_;
  std::vector<std::string> order_;  // submission order of pending names
  bool stop_ = false;
  bool woken_ = false;          // an enqueue or stop since the thread last slept
  std::condition_variable wake_;
  std::atomic<bool> finished_{false};
  std::map<std::string, std::chrono::steady_clock::time_point> partial_since_;
  std::map<std::string, bool> warned_;
  std::vector<char> buffer_;
  // join(): this rank's request, and what every rank has seen of everyone's (the same
  // on all ranks, since all decide from the same negotiated lists).
  std::shared_ptr<Handle::State> join_state_;
  std::shared_ptr<int> join_result_;
  int join_last_ = -1;
  std::vector<bool> seen_joined_;
  std::thread thread_;
};

}  // namespace saker::comm
