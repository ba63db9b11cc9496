// MPI_Reduce_scatter: the ranks agree on what they reduce (agree.hpp), then run the
// first half of a ring allreduce (or, below the ring's calibrated size, the direct
// algorithm's first step), reading the caller's buffer and never writing it.
//
// Segment r is reduced in one fixed order whatever the algorithm: it starts as member
// r+1's term, and each member after that along the ring folds its own term in front
// (term op partial), member r last. So the result is the same bits on every run, on
// either path, at any timing.
#include <algorithm>
#include <cstring>

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

namespace {

std::vector<std::size_t> segments(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> seg(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) seg[i + 1] = seg[i] + counts[i];
  return seg;
}

// The op the ring runs (avg sums, then divides once here).
void reduce_scatter_on(Core& core, int rank, int n, const void* send, void* recv, const std::vector<std::size_t>& counts,
                       DataType type, ReduceOp op) {
  ReduceOp base = op == ReduceOp::avg ? ReduceOp::sum : op;
  core.ring().reduce_scatter(static_cast<const char*>(send), static_cast<char*>(recv), segments(counts), type, base);
  if (op == ReduceOp::avg) reduce::scale_for_avg(recv, counts[static_cast<std::size_t>(rank)], type, n);
}

void judge(const std::vector<agree::Declared>& all, const std::string& name) {
  std::string why = agree::reduce_scatter_verdict(all);
  if (!why.empty()) agree::refuse("reduce_scatter", name, why);
}

}  // namespace

void Communicator::reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType type,
                                  ReduceOp op, const std::string& name) {
  Impl* i = impl_.get();
  agree::Declared mine = agree::declare(agree::Kind::reduce_scatter, type, static_cast<std::uint64_t>(op), counts, nullptr, size());
  std::vector<agree::Declared> all;
  // Declarations in one guarded step, judged outside it: a mismatch is the caller's
  // error, found before any data moved, and must not mark the communicator broken.
  i->run_sync([&] { all = agree::gather(*i, mine); });
  judge(all, name);
  i->run_sync([&] { reduce_scatter_on(*i->user, rank(), size(), send, recv, counts, type, op); });
}

Handle Communicator::reduce_scatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                          DataType type, ReduceOp op, const std::string& name) {
  Impl* i = impl_.get();
  agree::Declared mine = agree::declare(agree::Kind::reduce_scatter, type, static_cast<std::uint64_t>(op), counts, nullptr, size());
  const int r = rank(), n = size();
  return submit_refusable(*i, [=] {
    judge(agree::gather(*i, mine), name);
    reduce_scatter_on(*i->user, r, n, send, recv, counts, type, op);
  }, "reduce_scatter");
}

}  // namespace saker::comm
