// Allreduce and broadcast among the ranks of one node through a /dev/shm segment.
//
// Each rank owns a slot; data moves in pieces of one slot (double-buffered so only two
// barriers are needed per piece). A rank publishes only the parts of its piece that
// others reduce; rank i reduces part i in rank order 0..n-1 (its own term straight
// from its buffer), publishes it, and everyone copies the others' finished parts
// back. Small buffers (<= 64 KiB) take one barrier: every rank reduces the whole
// buffer from all slots, in the same rank order. The order is fixed, so results are
// reproducible and independent of timing and of the path. Waits spin briefly, then
// yield (a blocking wake-up costs ~50 us), and watch the deadline, abort notices and
// whether the peer's process still exists.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/comm/mesh.hpp"
#include "launcher/comm/tuning.hpp"
#include "saker/comm.hpp"

namespace saker::comm {

// Whether large allreduces publish into the slots with streaming (non-temporal) or
// ordinary stores, per power-of-two size class (see publish() in shm.cpp), picked by
// timing both (TimedChoice, tuning.hpp). Local to a rank: the stores never change a result.
class StoreChoice : public TimedChoice {
 public:
  bool streaming(std::size_t bytes) const { return second(bytes); }
};

class ShmGroup {
 public:
  // members: global ranks on this node in local order; name: unique per session+node.
  ShmGroup(Mesh& mesh, std::vector<int> members, const std::string& name, std::size_t slot_bytes);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }
  // Removes the name from /dev/shm (the mapping stays); call once everyone mapped it.
  void unlink();

  void allreduce(void* data, std::size_t count, DataType type, ReduceOp op);
  void broadcast(void* data, std::size_t bytes, int root_index);

 private:
  void barrier(const char* during);
  char* slot(int set, int who) const;

  Mesh& mesh_;
  std::vector<int> members_;
  int index_ = 0;
  std::string name_;
  std::size_t slot_bytes_;
  std::size_t map_bytes_ = 0;
  char* base_ = nullptr;
  std::uint64_t phase_ = 0;
  int set_ = 0;
  bool unlinked_ = false;
  StoreChoice stores_;
};

}  // namespace saker::comm
