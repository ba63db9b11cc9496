#include "ckpt/stream_write.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace saker::ckpt::stream {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void write_error(const fs::path& path, const std::string& why) {
  throw Error(explain("cannot write " + path.string(), why, "check free space and I/O errors (dmesg)"));
}

// The pipeline of pieces handed to the disk but maybe not yet on it.
class Flusher {
 public:
  Flusher(int fd, const fs::path& path) : fd_(fd), path_(path) {}

  // Starts writeback of [offset, offset + size) and, past the in-flight limit, waits for
  // the oldest piece and drops its clean pages.
  void written(std::uint64_t offset, std::size_t size) {
    if (!hints_) return;
    if (!range(offset, size, SYNC_FILE_RANGE_WRITE)) return;
    pending_.push_back({offset, size});
    while (pending_.size() > kPiecesInFlight) {
      const auto [o, n] = pending_.front();
      pending_.pop_front();
      if (!range(o, n, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)) return;
      ::posix_fadvise(fd_, static_cast<off_t>(o), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
    }
  }

 private:
  bool range(std::uint64_t offset, std::size_t size, unsigned flags) {
    if (::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(size), flags) == 0) return true;
    const int err = errno;
    // Not supported here (some network and FUSE filesystems): write plainly, fsync decides.
    if (err == EINVAL || err == ESPIPE || err == ENOSYS || err == EOPNOTSUPP) {
      hints_ = false;
      pending_.clear();
      return false;
    }
    // A writeback error seen here is consumed for this descriptor and might not reach
    // the commit's fsync on another one: it must fail the save now.
    write_error(path_, std::string("writeback failed: ") + std::strerror(err));
  }

  int fd_;
  const fs::path& path_;
  bool hints_ = true;
  std::deque<std::pair<std::uint64_t, std::size_t>> pending_;
};

void pwrite_all(int fd, const fs::path& path, std::uint64_t offset, const std::byte* p, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = ::pwrite(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) write_error(path, w < 0 ? std::strerror(errno) : "short write");
    done += static_cast<std::size_t>(w);
  }
}

}  // namespace

void write_regions(const fs::path& path, std::span<Region> regions) {
  std::vector<Region*> order;
  for (Region& r : regions) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const Region* a, const Region* b) { return a->offset < b->offset; });

  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(explain("cannot reopen " + path.string(), std::strerror(errno), "check the directory"));
  try {
    Flusher flusher(fd, path);
    for (Region* r : order) {
      hash::Xxh3Stream sum;
      for (std::size_t done = 0; done < r->bytes.size();) {
        const std::size_t n = std::min(kPieceBytes, r->bytes.size() - done);
        const std::byte* p = r->bytes.data() + done;
        pwrite_all(fd, path, r->offset + done, p, n);
        sum.update(p, n);  // still in cache from the copy into the page cache
        flusher.written(r->offset + done, n);
        done += n;
      }
      r->xxh3 = sum.digest();
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) write_error(path, std::string("close failed: ") + std::strerror(errno));
}

}  // namespace saker::ckpt::stream
