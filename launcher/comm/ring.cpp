// The ring's collectives: allreduce by its three algorithms (ring, direct, exchange; all
// give the same bits) with the first call's agreement and calibration, allgather,
// broadcast and barrier. The transfer loops they run on are in ring_transfer.cpp.
#include "launcher/comm/ring.hpp"

#include <algorithm>
#include <iterator>
#include <cstring>

#include "common/error.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {

Ring::Ring(Mesh& mesh, std::vector<int> members, int channel, std::size_t chunk_bytes, LinkPlan plan,
           aead::LinkCiphers* ciphers)
    : mesh_(mesh), ciphers_(ciphers), members_(std::move(members)), channel_(channel), chunk_(std::max<std::size_t>(chunk_bytes, 4096)),
      plan_(plan) {
  auto it = std::find(members_.begin(), members_.end(), mesh.rank());
  SAKER_ASSERT(it != members_.end(), "ring built on a rank outside it");
  index_ = static_cast<int>(it - members_.begin());
}

std::vector<std::size_t> Ring::even_split(std::size_t count, int parts) {
  std::vector<std::size_t> seg(static_cast<std::size_t>(parts) + 1, 0);
  std::size_t base = count / static_cast<std::size_t>(parts), extra = count % static_cast<std::size_t>(parts);
  for (int i = 0; i < parts; ++i)
    seg[static_cast<std::size_t>(i) + 1] = seg[static_cast<std::size_t>(i)] + base + (static_cast<std::size_t>(i) < extra ? 1 : 0);
  return seg;
}

namespace {

// Sizes the calibration times, and how often each (the median counts).
constexpr std::size_t kCalibrationSizes[] = {4096, 16384, 65536, 262144, 1u << 20};
constexpr int kCalibrationReps = 5;
// The exchange holds every member's whole buffer: only while that stays small.
constexpr std::size_t kExchangeHeld = 8u << 20;
bool exchange_fits(int n, std::size_t bytes) { return static_cast<std::size_t>(n - 1) * bytes <= kExchangeHeld; }

}  // namespace

void Ring::allreduce(void* data, std::size_t count, DataType type, ReduceOp op, std::vector<std::size_t> seg) {
  int n = size();
  if (n == 1 || count == 0) return;
  if (seg.empty()) seg = even_split(count, n);
  SAKER_ASSERT(seg.size() == static_cast<std::size_t>(n) + 1 && seg.back() == count, "bad ring segments");
  if (!agreed_) agree();
  // Every member has the same limits (calibrate() agrees on them), so every member
  // takes the same path; all three give the same bits.
  std::size_t bytes = count * size_of(type);
  if (exchange_fits(n, bytes) && bytes <= plan_.exchange_bytes) allreduce_exchange(static_cast<char*>(data), seg, type, op);
  else if (bytes <= plan_.direct_bytes) allreduce_direct(static_cast<char*>(data), seg, type, op);
  else allreduce_ring(static_cast<char*>(data), seg, type, op);
}

void Ring::allreduce_ring(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type);
  std::size_t chunk = std::max(es, chunk_ / es * es);  // exchange()'s chunk: the staging size
  if (tmp_.size() < chunk) tmp_.resize(chunk);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  // Blocks: a buffer larger than block_bytes runs as several whole rings, block b taking
  // the b-th of `blocks` even parts of every segment. An element stays in its segment,
  // so it is reduced in the same order whatever the number of blocks (bitwise the same
  // result); what changes is that a block's reduced half is sent on while it is still
  // in cache, instead of after the whole buffer has streamed through it.
  const std::size_t total = seg.back() * es;
  const std::size_t blocks =
      plan_.block_bytes == 0 ? 1 : std::max<std::size_t>(1, (total + plan_.block_bytes - 1) / plan_.block_bytes);
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    auto part = [&](int s, std::size_t i) {  // element offset of part i of segment s
      std::size_t b = seg[static_cast<std::size_t>(s)], c = seg[static_cast<std::size_t>(s) + 1] - b;
      return b + c * i / blocks;
    };
    auto at = [&](int s) { return base + part(s, blk) * es; };
    auto len = [&](int s) { return (part(s, blk + 1) - part(s, blk)) * es; };
    // The same on every member (segments may differ by an element): the send thread's key.
    const std::size_t step = (total * (blk + 1) / blocks - total * blk / blocks) / static_cast<std::size_t>(n);
    // Reduce-scatter: after n-1 steps this rank holds the full result of segment index+1.
    // Segment s is reduced along the ring from rank s: acc = x[s], then at each rank
    // s+k, acc = x[s+k] op acc; allreduce_direct() repeats exactly this order.
    bool threaded = send_thread_for(kReduceScatter, step);
    auto started = net::Clock::now();
    for (int s = 0; s < n - 1; ++s) {
      int send_seg = mod(index_ - s), recv_seg = mod(index_ - s - 1);
      char* dst = at(recv_seg);
      exchange(at(send_seg), len(send_seg), tmp_.data(), len(recv_seg), es,
               [&](std::size_t off, std::size_t l) { reduce::accumulate(dst + off, tmp_.data(), l / es, type, op); },
               false, "allreduce", threaded, /*staged=*/true);
    }
    record_phase(kReduceScatter, step, threaded, started);
    // Allgather: pass the finished segments around.
    threaded = send_thread_for(kAllgather, step);
    started = net::Clock::now();
    for (int s = 0; s < n - 1; ++s) {
      int send_seg = mod(index_ - s + 1), recv_seg = mod(index_ - s);
      exchange(at(send_seg), len(send_seg), at(recv_seg), len(recv_seg), es, nullptr, false, "allreduce", threaded);
    }
    record_phase(kAllgather, step, threaded, started);
  }
}

void Ring::allreduce_direct(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto at = [&](int s) { return base + seg[static_cast<std::size_t>(s)] * es; };
  auto len = [&](int s) { return (seg[static_cast<std::size_t>(s) + 1] - seg[static_cast<std::size_t>(s)]) * es; };
  // This rank owns segment index+1 (as after the ring's reduce-scatter); member j
  // owns segment j+1 and receives it from everyone.
  const int mine = mod(index_ + 1);
  const std::size_t piece = len(mine);
  if (tmp_.size() < piece * static_cast<std::size_t>(n)) tmp_.resize(piece * static_cast<std::size_t>(n));
  auto slot = [&](int j) { return tmp_.data() + static_cast<std::size_t>(j) * piece; };  // member j's piece of mine
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, at(mod(j + 1)), len(mod(j + 1)), slot(j), piece});
  exchange_all(xs, "allreduce");
  // The ring's order for segment `mine`: start at member `mine`, then each next member
  // folds its own term in front (accumulate(dst = its term, in = the partial)); the
  // last one is this rank, whose term sits in place.
  std::size_t count = piece / es;
  if (count > 0) {
    char* acc = slot(mine);
    for (int k = 1; k < n - 1; ++k) {
      char* term = slot(mod(mine + k));
      reduce::accumulate(term, acc, count, type, op);
      acc = term;
    }
    reduce::accumulate(at(mine), acc, count, type, op);
  }
  xs.clear();
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, at(mine), piece, at(mod(j + 1)), len(mod(j + 1))});
  exchange_all(xs, "allreduce");
}

void Ring::allreduce_exchange(char* base, const std::vector<std::size_t>& seg, DataType type, ReduceOp op) {
  int n = size();
  std::size_t es = size_of(type), bytes = seg.back() * es;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  if (tmp_.size() < bytes * static_cast<std::size_t>(n)) tmp_.resize(bytes * static_cast<std::size_t>(n));
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j)
    if (j != index_) xs.push_back({members_[static_cast<std::size_t>(j)], j, base, bytes, tmp_.data() + static_cast<std::size_t>(j) * bytes, bytes});
  exchange_all(xs, "allreduce");
  // Member j's term of element i: in place for this rank, else in j's slot.
  auto term = [&](int j, std::size_t elem) {
    return (j == index_ ? base : tmp_.data() + static_cast<std::size_t>(j) * bytes) + elem * es;
  };
  for (int s = 0; s < n; ++s) {
    std::size_t first = seg[static_cast<std::size_t>(s)], count = seg[static_cast<std::size_t>(s) + 1] - first;
    if (count == 0) continue;
    // The ring's order for segment s (see allreduce_ring): x[s], then x[s+k] op that.
    char* acc = term(s, first);
    for (int k = 1; k < n; ++k) {
      char* t = term(mod(s + k), first);
      reduce::accumulate(t, acc, count, type, op);
      acc = t;
    }
    if (acc != base + first * es) std::memcpy(base + first * es, acc, count * es);
  }
}

void Ring::agree() {
  agreed_ = true;
  // Every member must cut a buffer into the same blocks: the smallest block wins (8
  // bytes: one block whatever the plans say, so this allreduce needs no agreement).
  double block = static_cast<double>(plan_.block_bytes);
  allreduce_ring(reinterpret_cast<char*>(&block), even_split(1, size()), DataType::f64, ReduceOp::min);
  plan_.block_bytes = static_cast<std::size_t>(block);
  if (plan_.direct_bytes == LinkPlan::kCalibrate || plan_.exchange_bytes == LinkPlan::kCalibrate) calibrate();
}

void Ring::calibrate() {
  int n = size();
  constexpr std::size_t kSizes = std::size(kCalibrationSizes);
  constexpr std::size_t kAlgos = 3;  // ring, direct, exchange
  // times[kAlgos*i + a]: this rank's median of kCalibrationReps (1e30: not tried).
  std::vector<double> times(kAlgos * kSizes, 1e30);
  std::vector<float> buf(kCalibrationSizes[kSizes - 1] / sizeof(float), 0.0f);
  char* p = reinterpret_cast<char*>(buf.data());
  auto call = [&](std::size_t a, std::size_t bytes) {
    auto seg = even_split(bytes / sizeof(float), n);
    auto t0 = net::Clock::now();
    if (a == 0) allreduce_ring(p, seg, DataType::f32, ReduceOp::sum);
    else if (a == 1) allreduce_direct(p, seg, DataType::f32, ReduceOp::sum);
    else allreduce_exchange(p, seg, DataType::f32, ReduceOp::sum);
    return std::chrono::duration<double>(net::Clock::now() - t0).count();
  };
  // Untimed first: the ring's sockets (one per direction with two ranks) are new and
  // their buffers have not grown yet, and the staging buffers are not yet touched.
  // Timed cold, the ring lost at 1 MiB in about half of all starts here, and the
  // exchange it handed 1 MiB to then ran 2.2x slower than the ring for good.
  for (int warm = 0; warm < 2; ++warm)
    for (std::size_t a = 0; a < kAlgos; ++a)
      if (a != 2 || exchange_fits(n, kCalibrationSizes[kSizes - 1])) call(a, kCalibrationSizes[kSizes - 1]);
  for (std::size_t i = 0; i < kSizes; ++i) {
    std::vector<double> reps[kAlgos];
    for (int rep = 0; rep < kCalibrationReps; ++rep)
      for (std::size_t a = 0; a < kAlgos; ++a)
        if (a != 2 || exchange_fits(n, kCalibrationSizes[i])) reps[a].push_back(call(a, kCalibrationSizes[i]));
    for (std::size_t a = 0; a < kAlgos; ++a)
      if (!reps[a].empty()) {
        std::nth_element(reps[a].begin(), reps[a].begin() + kCalibrationReps / 2, reps[a].end());
        times[kAlgos * i + a] = reps[a][kCalibrationReps / 2];
      }
  }
  // Agree: the slowest member's times decide (the ring algorithm, whatever the plan).
  allreduce_ring(reinterpret_cast<char*>(times.data()), even_split(times.size(), n), DataType::f64, ReduceOp::max);
  // Each small algorithm serves the calibrated sizes up to the first where it lost:
  // the exchange while it beats both others, the direct one while it beats the ring.
  auto t = [&](std::size_t i, std::size_t a) { return times[kAlgos * i + a]; };
  plan_.exchange_bytes = 0;
  for (std::size_t i = 0; i < kSizes && t(i, 2) <= std::min(t(i, 0), t(i, 1)); ++i) plan_.exchange_bytes = kCalibrationSizes[i];
  plan_.direct_bytes = 0;
  for (std::size_t i = 0; i < kSizes && (kCalibrationSizes[i] <= plan_.exchange_bytes || t(i, 1) <= t(i, 0)); ++i)
    plan_.direct_bytes = kCalibrationSizes[i];
}

void Ring::allgather(const void* send, void* recv, std::size_t bytes) {
  int n = size();
  char* out = static_cast<char*>(recv);
  if (out + static_cast<std::size_t>(index_) * bytes != send)
    std::memmove(out + static_cast<std::size_t>(index_) * bytes, send, bytes);
  if (n == 1) return;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  const bool threaded = send_thread_for(kAllgather, bytes);
  const auto started = net::Clock::now();
  for (int s = 0; s < n - 1; ++s) {
    std::size_t send_slot = static_cast<std::size_t>(mod(index_ - s)), recv_slot = static_cast<std::size_t>(mod(index_ - s - 1));
    exchange(out + send_slot * bytes, bytes, out + recv_slot * bytes, bytes, 1, nullptr, false, "allgather", threaded);
  }
  record_phase(kAllgather, bytes, threaded, started);
}

void Ring::broadcast(void* data, std::size_t bytes, int root_index) {
  int n = size();
  if (n == 1 || bytes == 0) return;
  int pos = ((index_ - root_index) % n + n) % n;  // distance from the root along the ring
  bool sends = pos < n - 1, receives = pos > 0;
  exchange(data, sends ? bytes : 0, data, receives ? bytes : 0, 1, nullptr, receives, "broadcast", /*threaded=*/false);
}

void Ring::barrier() {
  std::vector<char> flags(static_cast<std::size_t>(size()), 1);
  char mine = 1;
  allgather(&mine, flags.data(), 1);
}

}  // namespace saker::comm
