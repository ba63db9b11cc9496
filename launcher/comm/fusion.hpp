// Tensor fusion: named allreduces submitted in any order, matched by name across
// ranks by a background thread, packed into a fusion buffer and reduced together.
// Names submitted by some ranks and not others produce a stall report (which rank is
// missing which tensor), then fail. A rank that has joined (out of data) stands in for
// every name the others reduce, contributing the op's identity, until all have joined.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "launcher/comm/fusion_wire.hpp"
#include "launcher/comm/impl.hpp"

namespace saker::comm {

class FusionEngine {
 public:
  explicit FusionEngine(Communicator::Impl& comm);
  ~FusionEngine();  // stops once every rank has asked to stop (bounded by the timeout)
  // shape: the tensor's dimensions, compared across ranks with the rest (empty: none given).
  Handle enqueue(const std::string& name, void* data, std::size_t count, DataType type, ReduceOp op,
                 const std::vector<std::int64_t>& shape = {});
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
    std::string shape;  // fusion_wire's text
  };
  // What a negotiation cycle found: no rank had anything (idle); a name that some ranks
  // submitted and others not yet (partial); or everything was reduced (settled).
  enum class Outcome { idle, partial, settled };
  // This rank's side of a cycle: the stop and join requests and the pending names in
  // submission order.
  struct Pending {
    bool stop = false, joining = false;
    std::vector<std::pair<std::string, fusion_wire::Spec>> items;
  };
  void loop();
  Outcome cycle();  // the steps below, in order
  Pending snapshot();
  std::vector<fusion_wire::RankList> negotiate(const Pending& mine);
  std::vector<std::pair<std::string, Entry>> take_ready(const std::vector<fusion_wire::RankList>& lists,
                                                        const std::vector<bool>& joined, bool any_joined,
                                                        std::set<std::string>& everywhere,
                                                        std::deque<std::vector<char>>& stand_ins);
  void reduce_ready(const std::vector<std::pair<std::string, Entry>>& ready);
  bool report_stalls(const std::vector<fusion_wire::RankList>& lists, const std::vector<bool>& joined,
                     const std::set<std::string>& everywhere);
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
