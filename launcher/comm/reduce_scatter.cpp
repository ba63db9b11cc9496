// MPI_Reduce_scatter: the ranks agree on what they reduce (agree.hpp), then run the
// first half of a ring allreduce (or, below the ring's calibrated size, the direct
// algorithm's first step), or inside one node an exchange through the shared-memory
// segment; all read the caller's buffer and never write it.
//
// Segment r is reduced in one fixed order whatever the algorithm: it starts as member
// r+1's term, and each member after that along the ring folds its own term in front
// (term op partial), member r last. So the result is the same bits on every run, on
// every path, at any timing.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "launcher/comm/agree.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/reduce.hpp"
#include "launcher/comm/ring.hpp"
#include "saker/error.hpp"

namespace saker::comm {

void Ring::reduce_scatter(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  const int n = size();
  SAKER_ASSERT(seg.size() == static_cast<std::size_t>(n) + 1 && seg[0] == 0, "bad reduce-scatter segments");
  const std::size_t es = size_of(type);
  if (n == 1) {
    if (seg[1] > 0) std::memmove(recv, send, seg[1] * es);
    return;
  }
  if (!agreed_) agree();  // the direct algorithm's limit is calibrated there (collective)
  if (seg.back() * es <= plan_.direct_bytes) reduce_scatter_direct(send, recv, seg, type, op);
  else reduce_scatter_ring(send, recv, seg, type, op);
}

void Ring::reduce_scatter_ring(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type,
                               ReduceOp op) {
  const int n = size();
  const std::size_t es = size_of(type);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto off = [&](int s) { return seg[static_cast<std::size_t>(s)] * es; };
  auto len = [&](int s) { return (seg[static_cast<std::size_t>(s) + 1] - seg[static_cast<std::size_t>(s)]) * es; };
  std::size_t widest = 0;
  for (int s = 0; s < n; ++s) widest = std::max(widest, len(s));
  const std::size_t chunk = std::max(es, chunk_ / es * es);  // exchange()'s staging size
  if (tmp_.size() < chunk) tmp_.resize(chunk);
  if (work_.size() < 2 * widest) work_.resize(2 * widest);
  // Partials alternate between two halves of work_: step s sends what step s-1 wrote.
  auto partial = [&](int s) { return work_.data() + static_cast<std::size_t>(s % 2) * widest; };
  // The same on every member (segments may differ by an element): the send thread's key.
  const std::size_t step = seg.back() * es / static_cast<std::size_t>(n);
  const bool threaded = send_thread_for(kReduceScatter, step);
  const auto started = net::Clock::now();
  for (int s = 0; s < n - 1; ++s) {
    // After n-1 steps this member holds segment index_ whole (see the top of the file).
    const int send_seg = mod(index_ - s - 1), recv_seg = mod(index_ - s - 2);
    const char* out_from = s == 0 ? send + off(send_seg) : partial(s - 1);
    char* dst = s == n - 2 ? recv : partial(s);
    const char* own = send + off(recv_seg);
    exchange(out_from, len(send_seg), tmp_.data(), len(recv_seg), es,
             [&](std::size_t o, std::size_t l) {
               const void* ins[2] = {own + o, tmp_.data()};
               reduce::combine(dst + o, ins, 2, l / es, type, op);
             },
             false, "reduce_scatter", threaded, /*staged=*/true);
  }
  record_phase(kReduceScatter, step, threaded, started);
}

void Ring::reduce_scatter_direct(const char* send, char* recv, const std::vector<std::size_t>& seg, DataType type,
                                 ReduceOp op) {
  const int n = size();
  const std::size_t es = size_of(type);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto off = [&](int s) { return seg[static_cast<std::size_t>(s)] * es; };
  auto len = [&](int s) { return (seg[static_cast<std::size_t>(s) + 1] - seg[static_cast<std::size_t>(s)]) * es; };
  const std::size_t piece = len(index_);
  if (tmp_.size() < piece * static_cast<std::size_t>(n)) tmp_.resize(piece * static_cast<std::size_t>(n));
  auto slot = [&](int j) { return tmp_.data() + static_cast<std::size_t>(j) * piece; };  // member j's term of mine
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, send + off(j), len(j), slot(j), piece});
  exchange_all(xs, "reduce_scatter");
  const std::size_t count = piece / es;
  if (count == 0) return;
  // The ring's order: member index_+1's term, then each next member's in front of it.
  const char* acc = slot(mod(index_ + 1));
  for (int k = 2; k < n; ++k) {
    char* term = slot(mod(index_ + k));
    reduce::accumulate(term, acc, count, type, op);
    acc = term;
  }
  const void* ins[2] = {send + off(index_), acc};
  reduce::combine(recv, ins, 2, count, type, op);
}

// Inside one node (transport shm), through the segment: the declarations and the first
// round of data share one barrier (ShmGroup::alltoallv_start, as alltoall's), every member
// sending segment j of its input to member j; member j folds the terms in the ring's order.
void ShmGroup::reduce_scatter_finish(const char* send, const std::vector<std::size_t>& seg_bytes, char* recv,
                                     std::size_t max_seg, DataType type, ReduceOp op) {
  const int n = size();
  SAKER_ASSERT(seg_bytes.size() == static_cast<std::size_t>(n), "shm reduce_scatter: one segment per member");
  std::size_t own = 0;
  for (int j = 0; j < index_; ++j) own += seg_bytes[static_cast<std::size_t>(j)];
  const std::size_t mine = seg_bytes[static_cast<std::size_t>(index_)];
  if (n == 1) {
    if (mine > 0) std::memmove(recv, send + own, mine);
    return;
  }
  exchange_rounds(send, seg_bytes, max_seg, a2a_head_, true, [&](int set, std::size_t done) {
    reduce_scatter_collect(set, send + own, recv, mine, done, type, op);
  }, "reduce_scatter");
}

void ShmGroup::reduce_scatter_collect(int set, const char* own, char* recv, std::size_t bytes, std::size_t done,
                                      DataType type, ReduceOp op) {
  const int n = size();
  const std::size_t share = alltoall_share(a2a_head_);  // whole cache lines: whole elements
  const std::size_t b = std::min(bytes, done), e = std::min(bytes, done + share);
  if (e <= b) return;
  const std::size_t count = (e - b) / size_of(type);
  // Member index_+k is at distance n-k below this one: it put its term in share n-k-1.
  auto term = [&](int k) -> const void* {
    return slot(0, set, (index_ + k) % n) + a2a_head_ + static_cast<std::size_t>(n - k - 1) * share;
  };
  char* out = recv + b;
  // Member index_+1's term, each next member's in front of it (term op partial), this
  // member's last: reduce_scatter_direct's order. The partial lives in out, which combine
  // may also read: it reads every input of an element before writing that element.
  const void* partial = term(1);
  for (int k = 2; k < n; ++k) {
    const void* ins[2] = {term(k), partial};
    reduce::combine(out, ins, 2, count, type, op);
    partial = out;
  }
  const void* ins[2] = {own + b, partial};
  reduce::combine(out, ins, 2, count, type, op);
}

namespace {

std::vector<std::size_t> segments(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> seg(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) seg[i + 1] = seg[i] + counts[i];
  return seg;
}

ReduceOp base_of(ReduceOp op) { return op == ReduceOp::avg ? ReduceOp::sum : op; }

// A reduce-scatter, and once it ran the verdict: "" when the ranks agreed, else why not.
struct Call {
  Communicator::Impl& impl;
  const void* send;
  void* recv;
  const std::vector<std::size_t>& counts;
  DataType type;
  ReduceOp op;
  std::string why;
};

// Inside one node: the declarations ride in the first round's barrier, with the group's
// reused table and byte counts (no allocation once warm). A rank whose counts are
// unusable publishes no data (the verdict refuses on every rank).
void through_shm(Call& c, ShmGroup& shm) {
  ShmGroup::Reused& u = shm.reused();
  agree::Table& t = u.table;
  t.declare(agree::Kind::reduce_scatter, c.type, static_cast<std::uint64_t>(c.op), c.counts, nullptr, c.impl.where.size);
  const std::size_t es = size_of(c.type);
  u.send_bytes.clear();
  std::size_t widest = 0;
  if (!t.problem())
    for (std::size_t count : c.counts) widest = std::max(widest, u.send_bytes.emplace_back(count * es));
  shm.alltoallv_start(t.row(), t.row_bytes(), t.all(), static_cast<const char*>(c.send), u.send_bytes, "reduce_scatter");
  c.why = t.reduce_scatter_verdict();
  if (c.why.empty())
    shm.reduce_scatter_finish(static_cast<const char*>(c.send), u.send_bytes, static_cast<char*>(c.recv), widest, c.type,
                              base_of(c.op));
}

// Declarations and data in one guarded step; the verdict goes in c.why for the caller to
// throw outside it: a mismatch is the caller's error, found before any data reached recv,
// and must not mark the communicator broken. Avg sums, then divides once.
void reduce_scatter_known(Call& c) {
  if (ShmGroup* shm = c.impl.user->shm_for(c.impl.transport)) {
    through_shm(c, *shm);
  } else {
    agree::Table t;
    t.declare(agree::Kind::reduce_scatter, c.type, static_cast<std::uint64_t>(c.op), c.counts, nullptr, c.impl.where.size);
    agree::gather(c.impl, t);
    c.why = t.reduce_scatter_verdict();
    if (c.why.empty())
      c.impl.user->ring().reduce_scatter(static_cast<const char*>(c.send), static_cast<char*>(c.recv), segments(c.counts),
                                         c.type, base_of(c.op));
  }
  if (c.why.empty() && c.op == ReduceOp::avg)
    reduce::scale_for_avg(c.recv, c.counts[static_cast<std::size_t>(c.impl.where.rank)], c.type, c.impl.where.size);
}

void judge(const std::string& why, const std::string& name) {
  if (!why.empty()) agree::refuse("reduce_scatter", name, why);
}

}  // namespace

void Communicator::reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType type,
                                  ReduceOp op, const std::string& name) {
  Call c{*impl_, send, recv, counts, type, op, {}};
  impl_->run_sync([&c] { reduce_scatter_known(c); });  // one reference: the std::function stores it in place
  judge(c.why, name);
}

Handle Communicator::reduce_scatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                          DataType type, ReduceOp op, const std::string& name) {
  Impl* i = impl_.get();
  return submit_refusable(*i, [=] {
    Call c{*i, send, recv, counts, type, op, {}};
    reduce_scatter_known(c);
    judge(c.why, name);
  }, "reduce_scatter");
}

}  // namespace saker::comm
