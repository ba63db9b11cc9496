// Horovod's alltoall (MPI_Alltoallv): the ranks first agree on what moves (agree.hpp),
// then every pair exchanges its rows directly: inside one node through the shared-memory
// segment (transport shm), else all pairs at once over the links the ring uses (one
// socket per direction, sealed frames under Transit::encrypt).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>

#include "launcher/comm/agree.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/ring.hpp"
#include "launcher/comm/shm_layout.hpp"
#include "launcher/comm/stream_copy.hpp"
#include "common/error.hpp"
#include "saker/error.hpp"

namespace saker::comm {

void Ring::alltoallv(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                     const std::vector<std::size_t>& recv_bytes) {
  const int n = size();
  SAKER_ASSERT(send_bytes.size() == static_cast<std::size_t>(n) && recv_bytes.size() == send_bytes.size(),
               "alltoallv: one count per member");
  std::vector<std::size_t> soff(send_bytes.size() + 1, 0), roff(soff.size(), 0);
  for (std::size_t j = 0; j < send_bytes.size(); ++j) {
    soff[j + 1] = soff[j] + send_bytes[j];
    roff[j + 1] = roff[j] + recv_bytes[j];
  }
  const auto me = static_cast<std::size_t>(index_);
  SAKER_ASSERT(send_bytes[me] == recv_bytes[me], "alltoallv: what a member sends itself differs from what it expects");
  if (send_bytes[me] > 0) std::memmove(recv + roff[me], send + soff[me], send_bytes[me]);
  if (n == 1) return;
  if (n == 2) {
    // One peer: the ring's own exchange, whose send thread keeps the kernel's send and
    // receive paths busy at once for large buffers. Both members key the choice on the
    // larger direction, which they both know, so they agree on it (send_thread_for).
    const auto peer = 1 - me;
    const std::size_t key = std::max(send_bytes[peer], recv_bytes[peer]);
    const bool threaded = send_thread_for(kAllgather, key);
    const auto started = net::Clock::now();
    exchange(send + soff[peer], send_bytes[peer], recv + roff[peer], recv_bytes[peer], 1, nullptr, false, "alltoall",
             threaded);
    record_phase(kAllgather, key, threaded, started);
    return;
  }
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j) {
    const auto u = static_cast<std::size_t>(j);
    if (j != index_) xs.push_back({members_[u], j, send + soff[u], send_bytes[u], recv + roff[u], recv_bytes[u]});
  }
  exchange_all(xs, "alltoall");
}

namespace {

// rows[i] * row_bytes into out, which keeps its capacity from call to call.
void bytes_into(const std::vector<std::size_t>& rows, std::size_t row_bytes, std::vector<std::size_t>& out) {
  out.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * row_bytes;
}

std::vector<std::size_t> bytes_of(const std::vector<std::size_t>& rows, std::size_t row_bytes) {
  std::vector<std::size_t> b;
  bytes_into(rows, row_bytes, b);
  return b;
}

// An alltoall whose receive counts the caller knows, and, once it ran, the verdict: "" when
// the ranks agreed, else why not (the same text on every rank).
struct Known {
  Communicator::Impl& impl;
  const void* send;
  const std::vector<std::size_t>& send_rows;
  void* recv;
  const std::vector<std::size_t>& recv_rows;
  std::size_t row_elems;
  DataType type;
  std::string why;
};

// A mismatch is the caller's error, found before any data moved: it must not mark the
// communicator broken (run_guarded does that to every other failure), so it is thrown
// outside the guarded step (agree::Mismatch; the asynchronous form fails only its handle).
void refuse_if(const std::string& why, const std::string& name) {
  if (!why.empty()) agree::refuse("alltoall", name, why);
}

// Counts this rank knows both ways: declarations and data in one step. Inside one node the
// declarations ride in the first round's barrier (ShmGroup::alltoallv_start), so a small
// alltoall costs one barrier, and the table and byte counts are the group's own, reused: no
// allocation once warm. A rank whose counts are unusable publishes no data, and nothing is
// copied out before every rank has judged every declaration.
void exchange_known(Known& k) {
  const std::size_t row_bytes = k.row_elems * size_of(k.type);
  const auto* in = static_cast<const char*>(k.send);
  auto* out = static_cast<char*>(k.recv);
  const int n = k.impl.where.size;
  if (ShmGroup* shm = k.impl.user->shm_for(k.impl.transport)) {
    ShmGroup::Reused& u = shm->reused();
    agree::Table& t = u.table;
    t.declare(agree::Kind::alltoall, k.type, k.row_elems, k.send_rows, &k.recv_rows, n);
    if (t.problem()) u.send_bytes.clear();
    else bytes_into(k.send_rows, row_bytes, u.send_bytes);
    shm->alltoallv_start(t.row(), t.row_bytes(), t.all(), in, u.send_bytes);
    k.why = t.alltoall_verdict();
    if (!k.why.empty()) return;
    bytes_into(k.recv_rows, row_bytes, u.recv_bytes);
    shm->alltoallv_finish(in, u.send_bytes, out, u.recv_bytes, t.max_pair_rows() * row_bytes);
    return;
  }
  agree::Table t;
  t.declare(agree::Kind::alltoall, k.type, k.row_elems, k.send_rows, &k.recv_rows, n);
  agree::gather(k.impl.user->ring(), t);
  k.why = t.alltoall_verdict();
  if (k.why.empty()) k.impl.user->ring().alltoallv(in, bytes_of(k.send_rows, row_bytes), out, bytes_of(k.recv_rows, row_bytes));
}

}  // namespace

// Inside one node the declarations take one barrier on the shared memory instead of a
// round trip over TCP: for small alltoalls that round trip is most of the time.
void agree::gather(Communicator::Impl& impl, Table& t) {
  if (ShmGroup* shm = impl.user->shm_for(impl.transport)) shm->allgather(t.row(), t.all(), t.row_bytes());
  else gather(impl.user->ring(), t);
}

// Between the members of one node, through the segment (shm.hpp): each round a member
// copies up to one share per peer into its slot, and after the barrier copies its share
// out of every peer's slot. Shares are whole cache lines, so no two members write one; the
// peer at distance d (1..n-1) up the members uses share d-1, on both sides.
std::size_t ShmGroup::alltoall_share(std::size_t head_bytes) const {
  const std::size_t share =
      std::min(shm_layout::kRoundBytes, (slot_bytes_ - head_bytes) / static_cast<std::size_t>(size() - 1)) / 64 * 64;
  SAKER_ASSERT(share > 0, "shm alltoallv: slots too small for the members");
  return share;
}

namespace {
// Each member's block's offset, into at (a member of the group: no allocation once warm).
void offsets_into(const std::vector<std::size_t>& bytes, std::vector<std::size_t>& at) {
  at.resize(bytes.size());
  for (std::size_t j = 0, o = 0; j < at.size(); o += bytes[j], ++j) at[j] = o;
}

// The largest block a member sends another (0 when the counts are unusable).
std::size_t largest_to_others(const std::vector<std::size_t>& bytes, int me) {
  std::size_t most = 0;
  for (std::size_t j = 0; j < bytes.size(); ++j)
    if (j != static_cast<std::size_t>(me)) most = std::max(most, bytes[j]);
  return most;
}
}  // namespace

void ShmGroup::alltoall_publish(int set, std::size_t head, const char* send, const std::vector<std::size_t>& send_bytes,
                                const std::vector<std::size_t>& at, std::size_t done) {
  const int n = size();
  const std::size_t share = alltoall_share(head);
  char* mine = slot(0, set, index_) + head;
  for (int d = 1; d < n; ++d) {
    const auto j = static_cast<std::size_t>((index_ + d) % n);
    const std::size_t b = std::min(send_bytes[j], done), e = std::min(send_bytes[j], done + share);
    if (e > b) std::memcpy(mine + static_cast<std::size_t>(d - 1) * share, send + at[j] + b, e - b);
  }
}

void ShmGroup::alltoall_collect(int set, std::size_t head, char* recv, const std::vector<std::size_t>& recv_bytes,
                                const std::vector<std::size_t>& at, std::size_t done) {
  const int n = size();
  const std::size_t share = alltoall_share(head);
  for (int d = 1; d < n; ++d) {
    const int i = (index_ - d + n) % n;
    const auto u = static_cast<std::size_t>(i);
    const std::size_t b = std::min(recv_bytes[u], done), e = std::min(recv_bytes[u], done + share);
    if (e > b) std::memcpy(recv + at[u] + b, slot(0, set, i) + head + static_cast<std::size_t>(d - 1) * share, e - b);
  }
}

// Rounds of shares: publish, barrier, collect(set, done). started: alltoallv_start
// published the first round, in the set before the current one.
void ShmGroup::exchange_rounds(const char* send, const std::vector<std::size_t>& send_bytes, std::size_t max_pair,
                               std::size_t head, bool started, FnRef<int, std::size_t> collect, const char* during) {
  const std::size_t share = alltoall_share(head);
  offsets_into(send_bytes, send_at_);
  Lane& lane = lanes_[0];
  std::size_t done = 0;
  if (started) {
    collect(lane.set ^ 1, 0);  // rewritten only after the next barrier
    done = share;
  }
  for (; done < max_pair; done += share) {
    alltoall_publish(lane.set, head, send, send_bytes, send_at_, done);
    barrier(0, during);
    collect(lane.set, done);
    lane.set ^= 1;  // as in broadcast: this set is rewritten only after the next barrier
  }
}

void ShmGroup::alltoall_rounds(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                               const std::vector<std::size_t>& recv_bytes, std::size_t max_pair, std::size_t head,
                               bool started) {
  const int n = size();
  SAKER_ASSERT(send_bytes.size() == static_cast<std::size_t>(n) && recv_bytes.size() == send_bytes.size(),
               "shm alltoallv: one count per member");
  const auto me = static_cast<std::size_t>(index_);
  SAKER_ASSERT(send_bytes[me] == recv_bytes[me], "shm alltoallv: what a member sends itself differs from what it expects");
  offsets_into(recv_bytes, recv_at_);
  offsets_into(send_bytes, send_at_);
  // Streamed once the call outgrows this rank's cache share: measured here (2 ranks, 16 MiB
  // of cache each), 16 MiB alltoalls 5.6-6.0 -> 6.4-6.7 GB/s, 64 MiB 4.6-4.7 -> 5.4-5.7; at
  // 2-4 MiB, which fit, streaming lost 14-17 -> 11.
  const std::size_t footprint = std::accumulate(send_bytes.begin(), send_bytes.end(), std::size_t{0}) +
                                std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::size_t{0});
  copy_within(recv + recv_at_[me], send + send_at_[me], send_bytes[me], footprint > stream_past_);
  if (n == 1) return;
  // From alltoallv_start where it began the call: there the segment path already copied
  // its first round in, single copy only its addresses; timing from here would favour it.
  const auto began = started ? a2a_began_ : std::chrono::steady_clock::now();
  const bool timed = cma_.use(max_pair);  // in single copy's range: timed under the path taken
  const bool single = cma_pick(max_pair);  // the same on every member (cma_pick)
  if (single) {
    if (alltoall_cma(send, recv, recv_bytes, started)) return cma_time(max_pair, true, began);
    head = 0;  // a read failed somewhere: every member redoes the whole call through the segment
    started = false;
  } else if (started && cma_.on && cma_shares_missing()) {
    head = 0;  // the first round is incomplete: every member runs all rounds
    started = false;
  }
  exchange_rounds(send, send_bytes, max_pair, head, started,
                  [&](int set, std::size_t done) { alltoall_collect(set, head, recv, recv_bytes, recv_at_, done); },
                  "alltoall");
  if (timed && !single) cma_time(max_pair, false, began);
}

void ShmGroup::alltoallv(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                         const std::vector<std::size_t>& recv_bytes, std::size_t max_pair) {
  alltoall_rounds(send, send_bytes, recv, recv_bytes, max_pair, 0, false);
}

void ShmGroup::alltoallv_start(const void* head, std::size_t head_bytes, void* heads, const char* send,
                               const std::vector<std::size_t>& send_bytes, const char* during) {
  a2a_began_ = std::chrono::steady_clock::now();
  a2a_head_ = (head_bytes + 63) / 64 * 64;
  Lane& lane = lanes_[0];
  std::memcpy(slot(0, lane.set, index_), head, head_bytes);
  // With single copy on, the block addresses follow the head (finish() pulls with them
  // when the largest block agreed is in single copy's range), and an alltoall whose own
  // largest block is in that range publishes no shares and flags it: should the agreed
  // largest be out of range, finish() then runs every round from the start.
  // reduce_scatter_finish reads its first round from the slots, so it always gets them.
  bool shares = true;
  if (cma_.on) {
    cma_at_ = a2a_head_;
    a2a_head_ += cma_addresses_bytes();
    shares = std::strcmp(during, "alltoall") != 0 || !cma_pick(largest_to_others(send_bytes, index_));
  }
  if (size() > 1 && send_bytes.size() == static_cast<std::size_t>(size())) {
    offsets_into(send_bytes, send_at_);
    if (cma_.on) cma_offer_blocks(lane.set, cma_at_, send, !shares);
    if (shares) alltoall_publish(lane.set, a2a_head_, send, send_bytes, send_at_, 0);
  }
  barrier(0, during);
  for (int j = 0; j < size(); ++j)
    std::memcpy(static_cast<char*>(heads) + static_cast<std::size_t>(j) * head_bytes, slot(0, lane.set, j), head_bytes);
  lane.set ^= 1;  // finish() reads the first round from the set before, untouched until the next barrier
}

void ShmGroup::alltoallv_finish(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                                const std::vector<std::size_t>& recv_bytes, std::size_t max_pair) {
  alltoall_rounds(send, send_bytes, recv, recv_bytes, max_pair, a2a_head_, true);
}

std::vector<std::size_t> Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts,
                                                 std::size_t row_elems, DataType type, const RecvBuffer& recv_buffer,
                                                 const std::string& name) {
  // The receive buffer is the caller's to size from the agreed counts: two steps here.
  agree::Table t;
  std::string why;
  std::vector<std::size_t> recv_rows;
  std::size_t max_pair_rows = 0;
  impl_->run_sync([&] {
    t.declare(agree::Kind::alltoall, type, row_elems, send_counts, nullptr, size());
    agree::gather(*impl_, t);
    if (!(why = t.alltoall_verdict()).empty()) return;
    for (int i = 0; i < size(); ++i) recv_rows.push_back(t.rows(i, rank()));
    max_pair_rows = t.max_pair_rows();
  });
  refuse_if(why, name);
  void* recv = recv_buffer(recv_rows);
  const std::size_t row_bytes = row_elems * size_of(type);
  std::size_t total = 0;
  for (std::size_t r : recv_rows) total += r;
  if (!recv && total * row_bytes > 0)
    throw Error(explain("alltoall" + (name.empty() ? std::string() : " of '" + name + "'") + ": the receive buffer is null",
                        "recv_buffer returned nullptr for " + std::to_string(total) + " rows",
                        "return a buffer of that many rows"));
  impl_->run_sync([&] {
    auto sb = bytes_of(send_counts, row_bytes), rb = bytes_of(recv_rows, row_bytes);
    if (ShmGroup* shm = impl_->user->shm_for(impl_->transport))
      shm->alltoallv(static_cast<const char*>(send), sb, static_cast<char*>(recv), rb, max_pair_rows * row_bytes);
    else
      impl_->user->ring().alltoallv(static_cast<const char*>(send), sb, static_cast<char*>(recv), rb);
  });
  return recv_rows;
}

void Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                             const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                             const std::string& name) {
  Known k{*impl_, send, send_counts, recv, recv_counts, row_elems, type, {}};
  impl_->run_sync([&k] { exchange_known(k); });  // one reference: the std::function stores it in place
  refuse_if(k.why, name);
}

// On the worker, declarations and data in one queued step: a mismatch fails the handle
// (with agree::Mismatch, the same on every rank) and leaves the communicator usable.
Handle submit_refusable(Communicator::Impl& impl, std::function<void()> op, const std::string& what) {
  auto state = std::make_shared<Handle::State>();
  state->what = what;
  state->limit = impl.options.timeout * 4 + std::chrono::seconds(10);
  impl.submit(
      [state, op = std::move(op)] {
        try {
          op();
          state->finish();
        } catch (const agree::Mismatch&) {
          state->finish(std::current_exception());
        } catch (...) {
          state->finish(std::current_exception());
          throw;  // the links are in an unknown state: the communicator is broken
        }
      },
      what);
  return Handle(state);
}

Handle Communicator::alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                     const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                                     const std::string& name) {
  Impl* i = impl_.get();
  return submit_refusable(*i, [=] {
    Known k{*i, send, send_counts, recv, recv_counts, row_elems, type, {}};
    exchange_known(k);
    refuse_if(k.why, name);
  }, "alltoall");
}

}  // namespace saker::comm
