#include "policies/audit_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace saker::policy::audit {

Log::Log(std::string path) : path_(std::move(path)) {}

Log::~Log() {
  if (fd_ >= 0) ::close(fd_);
}

bool Log::enqueue(std::string fields_json) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.size() >= kMaxQueued) {
    ++dropped_;
    return false;
  }
  queue_.push_back(std::move(fields_json));
  return true;
}

std::size_t Log::queued() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

std::string Log::flush() {
  std::vector<std::string> batch;
  std::uint64_t dropped = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(queue_);
    dropped = dropped_;
    dropped_ = 0;
  }
  if (batch.empty() && dropped == 0) return {};
  const auto requeue = [&](const std::string& problem) {
    const std::lock_guard<std::mutex> lock(mutex_);
    batch.insert(batch.end(), std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.swap(batch);
    dropped_ += dropped;
    return problem;
  };
  try {
    if (!chain_) chain_ = Chain::resume(path_);
  } catch (const std::exception& e) {
    return requeue(e.what());
  }
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd_ < 0)
      return requeue(explain("cannot open audit log " + path_, std::strerror(errno),
                             "make its directory writable by SlurmUser or set audit=PATH in job_submit_saker.conf"));
  }
  Chain chain = *chain_;
  std::string text;
  if (dropped > 0)
    text += chain.seal("\"event\":\"gap\",\"dropped\":" + std::to_string(dropped) +
                       ",\"reasons\":[\"the audit queue was full; records were dropped\"]");
  for (const auto& fields : batch) text += chain.seal(fields);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      // A partial line may be on disk now; start a fresh descriptor and chain from the file.
      ::close(fd_);
      fd_ = -1;
      chain_.reset();
      if (done == 0) return requeue(explain("cannot write audit log " + path_, why, "free space or fix permissions"));
      return explain("audit log " + path_ + " was cut short", why, "run saker-policy audit verify on it");
    }
    done += static_cast<std::size_t>(n);
  }
  chain_ = chain;
  ::fdatasync(fd_);
  return {};
}

}  // namespace saker::policy::audit
