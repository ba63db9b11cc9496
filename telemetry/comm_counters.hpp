// The collective library's counters, published per rank for the step's sampler.
//
// Why a mapped file: the sampler (a separate root process, see saker-sample-step) must
// read a rank's numbers without asking the rank anything, and the rank must pay no more
// than a few relaxed atomic adds per collective. When SAKER_TELEMETRY_DIR is set (the
// SPANK plugin sets it for each task), each rank maps DIR/comm.RANK, a fixed 64-byte
// little-endian record, and updates it in place. The file lives on tmpfs (/dev/shm) so
// the updates cost no I/O. The layout is part of saker-telemetry(5): change kVersion
// when it changes.
//
// Header-only on purpose: libsaker_comm includes it without linking libsaker_telemetry.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string>

namespace saker::telemetry {

struct CommCounters {
  static constexpr std::uint32_t kMagic = 0x43544b53;  // "SKTC"
  static constexpr std::uint32_t kVersion = 1;
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t world_size;
  std::uint64_t created_ns;       // CLOCK_REALTIME when the communicator came up
  std::uint64_t closed_ns;        // when it was destroyed (0: still open)
  std::uint64_t allreduce_calls;  // collectives of allreduce kind (user and fusion channels)
  std::uint64_t allreduce_bytes;  // bytes reduced by this rank
  std::uint64_t allreduce_ns;     // wall time inside allreduce
  std::uint64_t stalls;           // fusion stall reports (tensor names missing on some rank)
};
static_assert(sizeof(CommCounters) == 64, "saker-telemetry(5) fixes the comm counter record at 64 bytes");
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free, "counters are updated lock-free");

inline std::uint64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// A rank's side: maps DIR/comm.RANK when SAKER_TELEMETRY_DIR is set, else does nothing.
// Never throws: telemetry must not stop a training run.
class CommCountersPublisher {
 public:
  CommCountersPublisher(int rank, int world_size) {
    const char* dir = std::getenv("SAKER_TELEMETRY_DIR");
    if (dir == nullptr || *dir == '\0' || rank < 0) return;
    const std::string path = std::string(dir) + "/comm." + std::to_string(rank);
    // O_NOFOLLOW|O_EXCL: a name planted in the directory is not followed or reused.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    void* p = MAP_FAILED;
    if (::ftruncate(fd, sizeof(CommCounters)) == 0)
      p = ::mmap(nullptr, sizeof(CommCounters), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return;
    c_ = static_cast<CommCounters*>(p);
    c_->rank = rank;
    c_->world_size = world_size;
    c_->created_ns = realtime_ns();
    c_->version = CommCounters::kVersion;
    std::atomic_ref<std::uint32_t>(c_->magic).store(CommCounters::kMagic, std::memory_order_release);
  }
  ~CommCountersPublisher() {
    if (c_ == nullptr) return;
    std::atomic_ref<std::uint64_t>(c_->closed_ns).store(realtime_ns(), std::memory_order_relaxed);
    ::munmap(c_, sizeof(CommCounters));
  }
  CommCountersPublisher(const CommCountersPublisher&) = delete;
  CommCountersPublisher& operator=(const CommCountersPublisher&) = delete;

  bool active() const { return c_ != nullptr; }
  void allreduce_done(std::uint64_t bytes, std::uint64_t ns) {
    if (c_ == nullptr) return;
    std::atomic_ref<std::uint64_t>(c_->allreduce_calls).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(c_->allreduce_bytes).fetch_add(bytes, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(c_->allreduce_ns).fetch_add(ns, std::memory_order_relaxed);
  }
  void stall() {
    if (c_ != nullptr) std::atomic_ref<std::uint64_t>(c_->stalls).fetch_add(1, std::memory_order_relaxed);
  }

 private:
  CommCounters* c_ = nullptr;
};

}  // namespace saker::telemetry
