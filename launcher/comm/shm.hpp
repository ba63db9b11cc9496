// Allreduce and broadcast among the ranks of one node through a /dev/shm segment.
//
// Each rank owns a slot; data moves in pieces of one slot (double-buffered so only two
// barriers are needed per piece). A rank publishes only the parts of its piece that
// others reduce; rank i reduces part i in rank order 0..n-1 (its own term straight
// from its buffer), publishes it, and everyone copies the others' finished parts
// back. Small buffers (<= 64 KiB) take one barrier: every rank reduces the whole
// buffer from all slots, in the same rank order. The order is fixed, so results are
// reproducible and independent of timing and of the path. Waits busy-poll for as long as
// the peers have lately been late (SpinBudget: up to 50 us, only while every member may
// have a CPU of its own, and not for a peer last seen on the waiter's CPU), poll 50 us
// more under the same conditions (wait_step), then yield for up to 1 ms (a blocking
// wake-up costs ~50 us), then sleep on the peer's futex word; all along they watch the
// deadline, abort notices and whether the peer's process still exists.
//
// Large allreduces are cut into stripes, each with its own slots and flags (a lane of
// the segment), and a rank runs its stripes on up to that many threads (Lanes): one
// core cannot feed a server's memory. Every rank cuts the same stripes, so an element
// is reduced in the same rank order whatever the thread count. A rank with fewer
// threads runs its stripes one after another, lowest first; since every rank goes up
// in the same order, the lowest unfinished stripe always has all its ranks on it.
#pragma once

#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "launcher/comm/agree.hpp"
#include "launcher/comm/cma.hpp"
#include "launcher/comm/lanes.hpp"
#include "launcher/comm/mesh.hpp"
#include "launcher/comm/tuning.hpp"
#include "saker/comm.hpp"

namespace saker::comm {

// A callable, referred to for the length of a call: unlike a std::function, passing a
// lambda with captures allocates nothing (the alltoall rounds' collect step runs on every
// small alltoall).
template <class... A>
class FnRef {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FnRef>>>
  FnRef(F&& f)  // NOLINT: implicit, like std::function's
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) { (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  void operator()(A... a) const { call_(obj_, a...); }

 private:
  void* obj_;
  void (*call_)(void*, A...);
};

// Whether large allreduces publish into the slots with streaming (non-temporal) or
// ordinary stores, per power-of-two size class (see publish() in shm.cpp), picked by
// timing both (TimedChoice, tuning.hpp). Local to a rank: the stores never change a result.
class StoreChoice : public TimedChoice {
 public:
  bool streaming(std::size_t bytes) const { return second(bytes); }
};

// How long a barrier busy-waits before it yields, one per lane (barrier() in shm_barrier.cpp), in
// the style of glibc's adaptive mutexes: it follows how late the last member came,
// towards twice that lateness while spinning caught the peers, towards zero (a few pauses
// only, then yields) once a wait outlasted the spin or the peers came later than half the
// cap, so a rank whose peers compute between collectives stops spinning for them. A peer
// that came only after the spin ended may have been waiting for this member's CPU: a
// longer spin would only have made it later, so the budget never grows from such a wait
// (it would feed on its own delay). The cap is 0 where members share CPUs: spinning there
// keeps the awaited peer off its core.
class SpinBudget {
 public:
  explicit SpinBudget(std::int64_t cap_ns = 0) : cap_(cap_ns) {}
  std::int64_t ns() const { return ns_; }
  // After a wait: late_ns, how long after this member the last one arrived (by their
  // arrival times, so a yield that lost the core for a time slice does not count); caught,
  // whether it came while this member still spun.
  void learn(std::int64_t late_ns, bool caught) {
    if (late_ns <= 0) return;  // this member came last: nothing to learn about waiting
    const std::int64_t want = caught && late_ns <= cap_ / 2 ? 2 * late_ns : 0;
    ns_ += (std::min(want, cap_) - ns_) / 4;
  }

 private:
  std::int64_t cap_;
  std::int64_t ns_ = 0;
};

// Whether the members of a node may each have a CPU of their own, which SpinBudget's cap
// needs: the CPUs they may run on together (the union of their affinity masks, `masks`,
// one per member) and online number at least as many as they are. Together, not each:
// ranks pinned to one CPU apiece (taskset, Slurm's --cpu-bind) have one each.
bool own_cpu_each(const std::vector<cpu_set_t>& masks, int online);

// Moves the calling thread off `cpu` to another CPU of its affinity mask, and gives it its
// mask back: a migration the scheduler could have made, which the barrier makes when two
// members keep meeting on one CPU while the node has one for each (shm_barrier.cpp says when).
// Whether it moved: false where the mask holds `cpu` alone or not at all.
bool step_off_cpu(int cpu);
// What a barrier's waiter does next once its spin budget is spent, past_spin_ns later:
// pause-poll (hold: it may have a CPU of its own and the peer is not on it), yield the CPU
// between polls, or sleep on the peer's futex word (shm_barrier.cpp says for how long each).
enum class WaitStep { pause, yield, sleep };
WaitStep wait_step(std::int64_t past_spin_ns, bool hold);
// This thread's barriers whose last member arrived within the spin budget plus the hold
// (by the members' arrival times), and how many of them yielded the CPU (tests).
struct BarrierWaits {
  std::uint64_t short_waits = 0;
  std::uint64_t short_waits_yielded = 0;
};
BarrierWaits barrier_waits_this_thread() noexcept;

// The segment's file in /dev/shm. Another user on the node can create a file there under
// any name it can guess, and learn names from the rendezvous store. So the node's first
// member creates the segment with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, under a name
// with 128 random bits (common/shm_names.hpp), and tells the others the name over its mesh
// links (not the store, which may be torch's and readable); they use it only if it is
// still a regular file of their own uid, mode 0600, of the expected size. The name is
// sent before the segment is created, and every member removes it as soon as all of them
// mapped it, or when the start fails (a rank died), so a rank killed at any moment leaves
// nothing behind as long as one rank of the node lives on. What is left when all of them
// are killed at once in that short window, the next group created on the node by the same
// user removes (shm_names::sweep_stale).
namespace segment {
// The creator's side: a new private segment of `bytes`; never adopts an existing name.
// Returns its descriptor; throws saker::Error naming the segment.
int create(const std::string& name, std::size_t bytes);
// A member's side: the segment, refused (saker::Error naming it, the owner and mode found
// and the fix) unless it is a regular file owned by this uid, mode 0600, `bytes` long.
// With missing_ok, -1 while it does not exist or is still empty (its creator is between
// creating and sizing it).
int open_checked(const std::string& name, std::size_t bytes, bool missing_ok = false);
// Removes the name if it is this uid's regular file (a failed start's cleanup).
void remove_if_ours(const std::string& name) noexcept;
// A failed start's whole cleanup, for every user of a segment (ShmGroup, ShmOrdered):
// closes fd when it is open, unmaps base (bytes long) when mapped and sets it to null,
// and removes the name when known (remove_if_ours): a rank that died during the start
// then leaves nothing in /dev/shm, since every member knows the name and the first that
// gets here removes it.
void abandon(int fd, char*& base, std::size_t bytes, const std::string& name) noexcept;
}  // namespace segment

class ShmGroup {
 public:
  // Channels at and above this carry the segment's name between the members (below it:
  // the rings', see Ring::channel_between).
  static constexpr int kNameChannel = 128;

  // members: global ranks on this node in local order; channel: this group's own (the
  // name travels on kNameChannel + channel); stripes: how many stripes a large allreduce
  // is cut into, the same on every member (stripes_for_node, tuning.hpp); threads: how
  // many of them this rank runs at once. Returns once every member mapped the segment.
  ShmGroup(Mesh& mesh, std::vector<int> members, int channel, std::size_t slot_bytes, int stripes = 1,
           int threads = 1);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }
  int stripes() const { return static_cast<int>(lanes_.size()); }

  void allreduce(void* data, std::size_t count, DataType type, ReduceOp op);
  void broadcast(void* data, std::size_t bytes, int root_index);
  // Every member's `bytes` into recv in member order (send may be recv's own part).
  // One barrier per slot of data; a member copies in its part and copies out the others'.
  void allgather(const void* send, void* recv, std::size_t bytes);
  // MPI_Alltoallv among the members (alltoall.cpp): send_bytes[j] to member j, recv_bytes[i]
  // from member i, which the caller agreed with every member beforehand (agree.hpp): the
  // bytes i sends j are the bytes j expects from i, and max_pair, the most any member sends
  // another, is the same on every member (it fixes how many rounds run). Each round a
  // member's slot holds a share for each other member; one barrier per round.
  void alltoallv(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                 const std::vector<std::size_t>& recv_bytes, std::size_t max_pair);
  // The same with the agreement in the first round's barrier, for callers that know what
  // they receive: start() puts `head` (head_bytes, the same size on every member: the
  // declaration) in front of this member's first-round shares (none when send_bytes is
  // empty: the declaration says the counts are unusable) and returns after one barrier
  // with every member's head in heads, in member order. Nothing reaches recv before the
  // caller judged them: if it refuses, every member does, and nothing more is needed;
  // else finish() takes the first round from the slots and runs the rest.
  void alltoallv_start(const void* head, std::size_t head_bytes, void* heads, const char* send,
                       const std::vector<std::size_t>& send_bytes, const char* during = "alltoall");
  void alltoallv_finish(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                        const std::vector<std::size_t>& recv_bytes, std::size_t max_pair);
  // MPI_Reduce_scatter after alltoallv_start (reduce_scatter.cpp): seg_bytes[j], member j's
  // segment of send, went out as the alltoall's block for j, and every member reduces its
  // own segment into recv from the others' shares, in the ring's order (reduce_scatter.cpp's
  // top), so the bits are the ring path's. max_seg: the largest segment, the same everywhere.
  void reduce_scatter_finish(const char* send, const std::vector<std::size_t>& seg_bytes, char* recv,
                             std::size_t max_seg, DataType type, ReduceOp op);

  // What the declared collectives through this group (alltoall.cpp, reduce_scatter.cpp)
  // keep from call to call, so that a small one allocates nothing once warm: the
  // declarations, and the byte counts sent to and received from each member. Used only
  // inside a call, which the communicator runs one at a time (exec_mu).
  struct Reused {
    agree::Table table;
    std::vector<std::size_t> send_bytes, recv_bytes;
  };
  Reused& reused() { return reused_; }

 private:
  // A lane's own state: its flags' phase, which of its two slot sets is next, and how
  // long its barrier busy-waits before yielding.
  struct Lane {
    std::uint64_t phase = 0;
    int set = 0;
    SpinBudget spin;
    int shared_waits = 0;         // barriers in a row that saw a lower member on this CPU
    std::int64_t stepped_ns = 0;  // when this lane's thread last stepped off its CPU
  };
  // Creates (first member) or opens the segment, maps it, and removes its name once
  // every member mapped it. Throws saker::Error; nothing stays in /dev/shm then either.
  void map_segment(int channel);
  int share_name(int channel);  // the descriptor of the segment whose name it shares
  std::vector<cpu_set_t> members_masks();  // every member's affinity mask (a collective)
  void barrier(int lane, const char* during);
  char* slot(int lane, int set, int who) const;
  void allreduce_stripe(int lane, char* data, std::size_t count, DataType type, ReduceOp op, bool streaming);
  // alltoallv's pieces (alltoall.cpp): the bytes a share holds after a head of head_bytes;
  // this member's shares of [done, done + share) into its slot of `set`, and out of the others'.
  std::size_t alltoall_share(std::size_t head_bytes) const;
  // at: each member's block's offset in send or recv (offsets_of in alltoall.cpp).
  void alltoall_publish(int set, std::size_t head, const char* send, const std::vector<std::size_t>& send_bytes,
                        const std::vector<std::size_t>& at, std::size_t done);
  void alltoall_collect(int set, std::size_t head, char* recv, const std::vector<std::size_t>& recv_bytes,
                        const std::vector<std::size_t>& at, std::size_t done);
  void alltoall_rounds(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                       const std::vector<std::size_t>& recv_bytes, std::size_t max_pair, std::size_t head, bool started);
  void exchange_rounds(const char* send, const std::vector<std::size_t>& send_bytes, std::size_t max_pair,
                       std::size_t head, bool started, FnRef<int, std::size_t> collect, const char* during);
  // Single copy (cma.hpp, cma.cpp): the set-up probe; a call's closing verdicts (false on
  // every member when one read failed, which turns single copy off); this member's block
  // addresses into its slot of `set` at `at`; an alltoall's or allgather's pulls.
  void cma_setup();
  bool cma_settle(bool ok, const char* during);
  std::size_t cma_addresses_bytes() const;
  void cma_offer_blocks(int set, std::size_t at, const char* send, bool no_shares);
  bool cma_shares_missing() const;
  bool cma_pick(std::size_t bytes) const;
  void cma_time(std::size_t bytes, bool single, std::chrono::steady_clock::time_point began);
  bool alltoall_cma(const char* send, char* recv, const std::vector<std::size_t>& recv_bytes, bool started);
  bool allgather_cma(const char* send, char* out, std::size_t bytes);
  // Reduces [done, done + share) of this member's segment (own: its term in send) into recv.
  void reduce_scatter_collect(int set, const char* own, char* recv, std::size_t bytes, std::size_t done, DataType type,
                              ReduceOp op);

  Mesh& mesh_;
  std::vector<int> members_;
  int index_ = 0;
  std::string name_;
  std::size_t slot_bytes_;
  std::size_t map_bytes_ = 0;
  char* base_ = nullptr;
  std::vector<Lane> lanes_;
  bool own_cpus_ = false;  // whether each member may have a CPU of its own (own_cpu_each)
  // What a call may read and write on this rank before it streams its copy of its own
  // block (stream_copy.hpp): this member's share of the last-level cache.
  std::size_t stream_past_ = ~std::size_t{0};
  std::unique_ptr<Lanes> threads_;
  StoreChoice stores_;
  std::size_t a2a_head_ = 0;  // the head of the alltoall that alltoallv_start began
  std::chrono::steady_clock::time_point a2a_began_;  // when it began it (cma_time)
  std::vector<std::size_t> send_at_, recv_at_;  // each member's block's offset (alltoall.cpp)
  cma::State cma_;          // single copy between members: on, threshold, pids (cma.hpp)
  std::size_t cma_at_ = 0;  // where alltoallv_start put this member's block addresses in its slot
  cma::PathChoice cma_choice_;  // single copy or the segment, per alltoall size class (cma_time)
  std::vector<const void*> small_ins_;  // a small allreduce's inputs (the members' slots)
  Reused reused_;
};


}  // namespace saker::comm
