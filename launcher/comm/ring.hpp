// Ring algorithms over TCP links: allreduce as reduce-scatter then allgather, chunked
// and pipelined (a chunk is reduced as soon as it has arrived while the next ones are
// still in flight), and for buffers larger than the plan's block, block by block so
// that what is sent on is still in cache; allgather; pipelined broadcast along the ring.
//
// The ring is any ordered subset of ranks (all ranks, or one leader per node).
// Segment boundaries decide the reduction order of each element, so callers that
// must be bitwise reproducible pass boundaries that do not depend on timing.
//
// Small allreduces take a direct algorithm instead: every rank sends each segment
// straight to the rank that owns it, which reduces the pieces in the ring's order,
// then sends the result to everyone: two steps instead of 2(n-1), the same bytes. The
// smallest take the exchange: every rank sends its whole buffer to every other and
// reduces all segments itself, each in the ring's order: one step, (n-1)x the bytes.
// Both give bitwise the ring's result (the same operands in the same order), so the
// sizes where they stop paying can be measured (collectively, on first use: all ranks
// must agree on the algorithm) without making results depend on the measurement.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "launcher/comm/aead.hpp"
#include "launcher/comm/mesh.hpp"
#include "launcher/comm/net.hpp"
#include "launcher/comm/tuning.hpp"
#include "saker/comm.hpp"

namespace saker::comm {

class Ring {
 public:
  // ciphers: the sealed directions of this channel's links under Transit::encrypt
  // (shared with every Ring on the channel: a link's sequence numbers are the link's);
  // null: bytes travel as they are.
  Ring(Mesh& mesh, std::vector<int> members, int channel, std::size_t chunk_bytes, LinkPlan plan = {},
       aead::LinkCiphers* ciphers = nullptr);

  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }

  // seg: size()+1 element offsets (seg[0] = 0, seg.back() = count); empty: even split.
  void allreduce(void* data, std::size_t count, DataType type, ReduceOp op, std::vector<std::size_t> seg = {});
  void allgather(const void* send, void* recv, std::size_t bytes);
  void broadcast(void* data, std::size_t bytes, int root_index);
  void barrier();
  // Pairwise exchange among the members (alltoall.cpp): send_bytes[j] bytes from send,
  // packed in member order, go to member j while recv_bytes[j] arrive from member j into
  // recv, packed the same way; every pair's transfer at once, one socket per direction.
  void alltoallv(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                 const std::vector<std::size_t>& recv_bytes);
  // Member i receives in recv the op over all members of elements [seg[i], seg[i+1]) of
  // send, which stays as it was (reduce_scatter.cpp). The ring's first half, with the
  // direct algorithm below the calibrated size; both reduce an element in the same order.
  void reduce_scatter(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);

  static std::vector<std::size_t> even_split(std::size_t count, int parts);
  const LinkPlan& plan() const { return plan_; }

 private:
  void allreduce_ring(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);
  void allreduce_direct(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);
  void allreduce_exchange(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);
  void reduce_scatter_ring(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);
  void reduce_scatter_direct(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type, ReduceOp op);
  // On the first allreduce: the members settle what they must share (the block size),
  // then calibrate() if the plan asks for it. Collective.
  void agree();
  // Times the three algorithms on a few sizes, agrees on the slowest rank's times and
  // sets plan_.exchange_bytes and direct_bytes. Collective: runs inside the first
  // allreduce on every member.
  void calibrate();
  // One transfer per peer, all at once (the direct algorithm's steps).
  struct Transfer {
    int peer;   // global rank
    int index;  // its place in the ring
    const char* send;
    std::size_t slen;
    char* recv;
    std::size_t rlen;
    std::size_t sent = 0, got = 0;
    aead::SealedSender* tx = nullptr;  // Transit::encrypt
    aead::SealedReceiver* rx = nullptr;
  };
  void exchange_all(std::vector<Transfer>& xs, const char* during);
  // Data from index `from` to index `to` travels on channel_, or on channel_ + this when
  // it flows from a higher index to a lower one: every ordered pair has a socket of its
  // own, for the ring's steps and the direct and exchange algorithms alike. Two
  // directions on one socket made the exchange 2.2x slower than the ring at 1 MiB: while
  // a rank is inside send() the kernel holds that socket and diverts arriving data to
  // its backlog.
  static constexpr int kSecondDirection = 64;
  int channel_between(int from, int to) const { return channel_ + (from > to ? kSecondDirection : 0); }
  // Sends sbuf to the next rank while receiving rbuf from the previous one. With
  // forward, the send side may only send what has been received (broadcast relay).
  // on_chunk(offset, len) runs on every newly received whole chunk (and the tail).
  // With staged, rbuf holds one chunk only and is reused: each chunk is consumed by
  // on_chunk (it finds the bytes at rbuf) before the next one is received, so that
  // received data is reduced while it is still in cache instead of making a round trip
  // through memory.
  // With threaded (not with forward), a thread of its own sends sbuf while this one
  // receives.
  void exchange(const void* sbuf, std::size_t slen, void* rbuf, std::size_t rlen, std::size_t elem,
                const std::function<void(std::size_t, std::size_t)>& on_chunk, bool forward,
                const char* during, bool threaded, bool staged = false);
  // Whether a phase whose steps move step_bytes each sends from a thread: forced by
  // the plan, else timed per size class and agreed among the members (TimedChoice),
  // the reduce-scatter's phase (which also reduces) apart from the allgather's.
  // Collective when an agreement is due: every member calls it with the same
  // step_bytes at the same point, and records the phase with record_phase().
  enum Phase { kReduceScatter = 0, kAllgather = 1 };
  bool send_thread_for(Phase phase, std::size_t step_bytes);
  void record_phase(Phase phase, std::size_t step_bytes, bool threaded, net::Clock::time_point started);

  Mesh& mesh_;
  aead::LinkCiphers* ciphers_;
  std::vector<int> members_;
  int index_ = 0;
  int channel_;
  std::size_t chunk_;
  LinkPlan plan_;
  TimedChoice send_thread_[2];  // by Phase
  bool agreed_ = false;
  std::vector<char> tmp_;
  std::vector<char> work_;  // reduce_scatter_ring's two partial segments
};

}  // namespace saker::comm
