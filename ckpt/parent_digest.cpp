#include "ckpt/parent_digest.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "provenance/text.hpp"

namespace saker::ckpt {
namespace {

std::mutex g_hold_mu;
std::condition_variable g_hold_cv;
bool g_hold = false;

// A write moves the size or mtime; mtime can be set back (utimensat), which moves ctime.
// ctime also moves when the name is unlinked or replaced, which leaves the bytes as
// loaded: so a moved ctime counts only while the link count stayed the same.
bool same_bytes_likely(const struct stat& a, const struct stat& b) {
  const bool same_ctime = a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         (same_ctime || a.st_nlink != b.st_nlink);
}

}  // namespace

void internal::hold_parent_digests_for_test(bool hold) {
  {
    std::lock_guard<std::mutex> lock(g_hold_mu);
    g_hold = hold;
  }
  g_hold_cv.notify_all();
}

ParentDigest::ParentDigest(int fd, std::string file, bool drop_behind) : file_(std::move(file)), drop_behind_(drop_behind) {
  fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (fd_ < 0 || ::fstat(fd_, &before_) != 0) {
    why_ = std::string("the loaded file cannot be kept open for its SHA-256 (") + std::strerror(errno) +
           "; raise the process's open-file limit, ulimit -n)";
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
}

ParentDigest::~ParentDigest() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(g_hold_mu);  // a held thread must see stop_ after it wakes
  }
  g_hold_cv.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void ParentDigest::start() {
  if (started_ || fd_ < 0) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

std::optional<std::string> ParentDigest::result(std::string* why) {
  if (!started_) {
    if (why) *why = why_.empty() ? "its SHA-256 was never started" : why_;
    return std::nullopt;
  }
  if (!joined_) {
    thread_.join();
    joined_ = true;
  }
  if (why) *why = why_;
  return digest_;
}

// On the thread: every byte from 0 to the end through the load's descriptor, then the
// file's state again. Sets digest_ or why_; never throws.
void ParentDigest::run() {
  {
    std::unique_lock<std::mutex> lock(g_hold_mu);
    g_hold_cv.wait(lock, [this] { return !g_hold || stop_.load(); });
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    why_ = "OpenSSL has no SHA-256 context";
    return;
  }
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  std::uint64_t at = 0;
  while (!stop_) {
    const ssize_t n = ::pread(fd_, buf.data(), buf.size(), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why_ = std::string("read error: ") + std::strerror(errno);
      return;
    }
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n)) != 1) {
      why_ = "OpenSSL's SHA-256 update failed";
      return;
    }
    if (drop_behind_) ::posix_fadvise(fd_, static_cast<off_t>(at), n, POSIX_FADV_DONTNEED);
    at += static_cast<std::uint64_t>(n);
    read_ = at;
  }
  if (stop_) {
    why_ = "its SHA-256 was stopped";
    return;
  }
  struct stat after {};
  if (::fstat(fd_, &after) != 0 || !same_bytes_likely(before_, after) ||
      at != static_cast<std::uint64_t>(before_.st_size)) {
    why_ = "the file was changed in place after it was loaded (its size or change time moved), so the bytes hashed "
           "may not be the bytes loaded";
    return;
  }
  unsigned char md[32];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1 || len != 32) {
    why_ = "OpenSSL's SHA-256 final step failed";
    return;
  }
  digest_ = saker::provenance::hex(std::string_view(reinterpret_cast<const char*>(md), 32));
}

}  // namespace saker::ckpt
