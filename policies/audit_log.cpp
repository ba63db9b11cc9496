#include "policies/audit_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/json.hpp"
#include "policies/audit_head.hpp"

namespace saker::policy::audit {

Log::Log(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {}

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
  std::string note;
  if (!chain_) {
    const std::string problem = resume_chain(note);
    if (!problem.empty()) return requeue(problem);
  }
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd_ < 0)
      return requeue(explain("cannot open audit log " + path_, std::strerror(errno),
                             "make its directory writable by SlurmUser or set audit=PATH in job_submit_saker.conf"));
  }
  Chain chain = *chain_;
  std::string text;
  if (!note.empty()) text += chain.seal("\"event\":\"head_mismatch\",\"reasons\":[" + json::quote(note) + "]");
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
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return explain("cannot stat audit log " + path_, std::strerror(errno), "check the disk");
  const std::string problem =
      write_head(path_, Head{chain.last_id(), chain.last_hash(), static_cast<std::uint64_t>(st.st_size)}, key_);
  if (!problem.empty()) return explain(problem, "the records are written; the head is behind", "free space or fix permissions");
  return {};
}

std::string Log::resume_chain(std::string& note) {
  Chain chain;
  try {
    chain = Chain::resume(path_);
  } catch (const std::exception& e) {
    return e.what();
  }
  std::string problem;
  const auto head = read_head(path_, key_, problem);
  if (!head) {
    // A new log has neither; an old log without a head is sealed from now on.
    if (chain.last_id() > 0) note = problem + "; sealing the log from here on";
  } else if (head->last_id > chain.last_id()) {
    note = "the log ends at record id " + std::to_string(chain.last_id()) + " but its sealed head at id " +
           std::to_string(head->last_id) + ": the tail was deleted; ids continue after the sealed one";
    chain = Chain(head->last_id, chain.last_hash());
  } else if (head->last_id < chain.last_id()) {
    note = "records after id " + std::to_string(head->last_id) + " up to id " + std::to_string(chain.last_id()) +
           " were not sealed (written just before a crash, or appended by hand)";
  } else if (head->last_hash != chain.last_hash()) {
    note = "the last record (id " + std::to_string(chain.last_id()) + ") is not the one that was sealed";
  }
  chain_ = chain;
  return {};
}

}  // namespace saker::policy::audit
