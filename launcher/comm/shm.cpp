// ShmGroup's collectives through the node's segment (shm.hpp); its barrier is in
// shm_barrier.cpp, the segment's making and checking in shm_segment.cpp.
#include "launcher/comm/shm.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "launcher/comm/reduce.hpp"
#include "launcher/comm/shm_layout.hpp"
#include "launcher/comm/stream_copy.hpp"

namespace saker::comm {
using namespace shm_layout;
namespace {

// Up to this size an allreduce takes one barrier and every rank reduces everything.
constexpr std::size_t kDirectBytes = 64 * 1024;
// The least a stripe carries: below ~1 MiB its copies take less than the two futex
// wake-ups that hand it to a thread and back.
constexpr std::size_t kStripeBytes = 1 << 20;

// Copies into a slot. Slot lines were read by the other ranks on their previous use,
// so ordinary stores must first take each line back from their caches: cheap between
// SMT siblings that share a cache, but ~0.35 us a line between cores in different
// CCDs. Non-temporal stores skip that, at the price of a trip through memory. Measured
// here for 64 MiB: ordinary 6.6 ms / streaming 11.7 ms on siblings, ordinary 48 ms /
// streaming 7.6 ms across CCDs, and a VM's vCPUs move between the two. So StoreChoice
// picks per size by timing both. Results are the same either way.
void publish(char* slot, const char* src, std::size_t bytes, bool streaming) {
  if (streaming) copy_streaming(slot, src, bytes);  // fenced: the barrier's flag comes after the data
  else std::memcpy(slot, src, bytes);
}

// One of `parts` shares of `count` elements, rounded up to whole cache lines of `align`
// elements: shares then start on cache lines, so no two ranks or stripes write one line.
std::size_t share_in_lines(std::size_t count, std::size_t parts, std::size_t align) {
  return ((count + parts - 1) / parts + align - 1) / align * align;
}

}  // namespace

ShmGroup::ShmGroup(Mesh& mesh, std::vector<int> members, int channel, std::size_t slot_bytes, int stripes,
                   int threads)
    : mesh_(mesh),
      members_(std::move(members)),
      // The slot memory is shared among the lanes, so the segment keeps its size.
      slot_bytes_(std::max<std::size_t>(kDirectBytes, slot_bytes / static_cast<std::size_t>(std::max(1, stripes))) /
                  kLine * kLine),
      lanes_(static_cast<std::size_t>(std::max(1, stripes))) {
  auto it = std::find(members_.begin(), members_.end(), mesh.rank());
  SAKER_ASSERT(it != members_.end(), "shm group built on a rank outside it");
  if (members_.size() > kMaxLocal)
    throw Error(explain("too many ranks on one node for the shared-memory path (" + std::to_string(members_.size()) + ")",
                        "the segment has room for 256", "set SAKER_COMM_TRANSPORT=ring"));
  index_ = static_cast<int>(it - members_.begin());
  // Members that disagree on the stripes (SAKER_COMM_SHM_STRIPES set on some only) expect
  // other sizes: open_checked() refuses the segment instead of one rank overrunning it.
  map_bytes_ = lanes_.size() * (header_bytes() + 2 * members_.size() * slot_bytes_);
  map_segment(channel);
  // Members busy-wait only when each may have a CPU of its own (SpinBudget, own_cpu_each).
  // Each member's own mask alone gave pinned ranks (one CPU apiece) no spin at all.
  own_cpus_ = own_cpu_each(members_masks(), cores_online());
  stream_past_ = stream_past(last_level_cache(), static_cast<int>(members_.size()));
  for (Lane& lane : lanes_) lane.spin = SpinBudget(own_cpus_ ? kSpinCapNs : 0);
  cma_setup();  // whether alltoall and allgather may copy once between members (cma.hpp)
  threads_ = std::make_unique<Lanes>(std::clamp(threads, 1, static_cast<int>(lanes_.size())));
}

ShmGroup::~ShmGroup() {
  threads_.reset();  // no lane runs past here
  if (base_) munmap(base_, map_bytes_);
}

// The segment: all lanes' flags first, then each lane's two slot sets.
char* ShmGroup::slot(int lane, int set, int who) const {
  std::size_t n = members_.size();
  std::size_t index = (static_cast<std::size_t>(lane) * 2 + static_cast<std::size_t>(set)) * n + static_cast<std::size_t>(who);
  return base_ + lanes_.size() * header_bytes() + index * slot_bytes_;
}

void ShmGroup::allreduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  int n = size();
  if (n == 1 || count == 0) return;
  std::size_t es = size_of(type);
  char* out = static_cast<char*>(data);
  if (count * es <= std::min(kDirectBytes, slot_bytes_)) {
    // Small: one barrier. Everyone publishes its buffer and reduces all of it
    // (the same rank order as below, so results do not depend on the path).
    Lane& lane = lanes_[0];
    std::vector<const void*>& ins = small_ins_;  // kept: a small allreduce allocates nothing once warm
    ins.resize(static_cast<std::size_t>(n));
    std::memcpy(slot(0, lane.set, index_), out, count * es);
    barrier(0, "allreduce");
    for (int j = 0; j < n; ++j) ins[static_cast<std::size_t>(j)] = slot(0, lane.set, j);
    reduce::combine(out, ins.data(), n, count, type, op);
    lane.set ^= 1;  // the other set next: this one is rewritten only after the next barrier
    return;
  }
  const bool streaming = stores_.streaming(count * es);
  const auto started = std::chrono::steady_clock::now();
  // Stripes of whole cache lines, at least kStripeBytes each: the count alone decides,
  // so every rank cuts the same ones.
  std::size_t align = std::max<std::size_t>(1, kLine / es);
  std::size_t used = std::clamp<std::size_t>(count * es / kStripeBytes, 1, lanes_.size());
  std::size_t stripe = share_in_lines(count, used, align);
  // No more threads than stripes: a 2 MiB allreduce wakes one helper, not three.
  const std::size_t threads = std::min<std::size_t>(used, static_cast<std::size_t>(threads_->count()));
  threads_->run([&](int t) {
    // Lowest stripe first on every rank and thread (see shm.hpp): no rank waits for ever.
    for (std::size_t s = static_cast<std::size_t>(t); s < used; s += threads) {
      std::size_t b = std::min(count, s * stripe), e = std::min(count, b + stripe);
      allreduce_stripe(static_cast<int>(s), out + b * es, e - b, type, op, streaming);
    }
  }, static_cast<int>(threads));
  stores_.record(count * es, streaming, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

void ShmGroup::allreduce_stripe(int lane_index, char* data, std::size_t count, DataType type, ReduceOp op,
                                bool streaming) {
  int n = size();
  std::size_t es = size_of(type);
  Lane& lane = lanes_[static_cast<std::size_t>(lane_index)];
  std::vector<const void*> ins(static_cast<std::size_t>(n));
  std::size_t piece_elems = std::min(slot_bytes_, kRoundBytes) / es;  // bits do not depend on it: rank order
  // Parts start on cache lines so that ranks never write the same line.
  std::size_t align = std::max<std::size_t>(1, kLine / es);
  for (std::size_t done = 0; done < count; done += piece_elems) {
    std::size_t m = std::min(piece_elems, count - done);
    char* piece = data + done * es;
    std::size_t part = share_in_lines(m, static_cast<std::size_t>(n), align);
    auto part_range = [&](int i) {
      std::size_t b = std::min(m, part * static_cast<std::size_t>(i));
      return std::make_pair(b, std::min(m, b + part));
    };
    char* mine = slot(lane_index, lane.set, index_);
    // 1. Publish only what the others reduce: their parts of my buffer.
    for (int j = 0; j < n; ++j) {
      auto [bj, ej] = part_range(j);
      if (j != index_ && ej > bj) publish(mine + bj * es, piece + bj * es, (ej - bj) * es, streaming);
    }
    barrier(lane_index, "allreduce");
    // 2. Reduce my part in rank order, my own term straight from my buffer, into my
    //    buffer (with ordinary stores, also into my slot in the same pass); publish it.
    auto [b, e] = part_range(index_);
    if (e > b) {
      for (int j = 0; j < n; ++j)
        ins[static_cast<std::size_t>(j)] = j == index_ ? piece + b * es : slot(lane_index, lane.set, j) + b * es;
      reduce::combine(piece + b * es, ins.data(), n, e - b, type, op, streaming ? nullptr : mine + b * es);
      if (streaming) publish(mine + b * es, piece + b * es, (e - b) * es, true);
    }
    barrier(lane_index, "allreduce");
    // 3. Everyone else's reduced parts.
    for (int j = 0; j < n; ++j) {
      auto [bj, ej] = part_range(j);
      if (j != index_ && ej > bj) std::memcpy(piece + bj * es, slot(lane_index, lane.set, j) + bj * es, (ej - bj) * es);
    }
    lane.set ^= 1;  // the next piece uses the other slots: no third barrier needed
  }
}

void ShmGroup::broadcast(void* data, std::size_t bytes, int root_index) {
  if (size() == 1 || bytes == 0) return;
  char* p = static_cast<char*>(data);
  for (std::size_t done = 0; done < bytes; done += slot_bytes_) {
    std::size_t m = std::min(slot_bytes_, bytes - done);
    Lane& lane = lanes_[0];
    if (index_ == root_index) publish(slot(0, lane.set, root_index), p + done, m, false);
    barrier(0, "broadcast");
    if (index_ != root_index) std::memcpy(p + done, slot(0, lane.set, root_index), m);
    lane.set ^= 1;  // a slot set is rewritten two pieces later, after the next barrier
  }
}

void ShmGroup::allgather(const void* send, void* recv, std::size_t bytes) {
  char* out = static_cast<char*>(recv);
  char* own = out + static_cast<std::size_t>(index_) * bytes;
  // Past this rank's cache share, streamed: 64 MiB 4.7 -> 5.5 GB/s here (2 ranks).
  copy_within(own, static_cast<const char*>(send), bytes, bytes * (members_.size() + 1) > stream_past_);
  if (size() == 1 || bytes == 0) return;
  // Single copy (cma.cpp) when asked for; if a read failed, every member redoes it here.
  if (cma_.use_gather(bytes) && allgather_cma(static_cast<const char*>(send), out, bytes)) return;
  const std::size_t round = std::min(slot_bytes_, kRoundBytes);  // pinned here, 64 MiB 4.7-5.0 -> 5.5-5.6 GB/s
  for (std::size_t done = 0; done < bytes; done += round) {
    std::size_t m = std::min(round, bytes - done);
    Lane& lane = lanes_[0];
    std::memcpy(slot(0, lane.set, index_), own + done, m);
    barrier(0, "allgather");
    for (int j = 0; j < size(); ++j)
      if (j != index_) std::memcpy(out + static_cast<std::size_t>(j) * bytes + done, slot(0, lane.set, j), m);
    lane.set ^= 1;  // as in broadcast: rewritten only after the next barrier
  }
}


}  // namespace saker::comm
