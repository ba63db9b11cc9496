// The audit log's writer. enqueue() is what a slurmctld callback calls: it only moves a
// string into a bounded in-memory queue (no I/O, no fsync under slurmctld's locks).
// flush() does the I/O: it continues the hash chain of the file, appends every queued
// record with one O_APPEND write and fdatasync()s once per batch. The job_submit plugin
// calls flush() from its background thread (see plugins/job_submit/background.hpp);
// tools call it directly. After each batch it rewrites the sealed head (LOG.head, see
// audit_head.hpp), so that a deleted tail is detected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "policies/audit.hpp"

namespace saker::policy::audit {

class Log {
 public:
  static constexpr std::size_t kMaxQueued = 100000;

  // `key`: the sealed head's MAC key ("" for an unkeyed head).
  explicit Log(std::string path, std::string key = {});
  ~Log();
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  // Thread-safe, non-blocking apart from a short mutex. Returns false (and counts the
  // record as dropped, reported in the log by the next flush) when the queue is full.
  bool enqueue(std::string fields_json);

  // Writes what is queued. Returns "" or a problem text (the records stay queued and
  // are retried on the next flush). Call from one thread at a time.
  std::string flush();

  const std::string& path() const { return path_; }
  std::size_t queued() const;

 private:
  // Continues the file's chain. When the file and its sealed head disagree (a deleted tail,
  // or records written just before a crash and never sealed), the chain continues past
  // the head's last id so that the gap stays visible, and a note record says what was found.
  std::string resume_chain(std::string& note);

  std::string path_;
  std::string key_;
  mutable std::mutex mutex_;
  std::vector<std::string> queue_;
  std::uint64_t dropped_ = 0;
  // Owned by the flushing thread.
  std::optional<Chain> chain_;
  int fd_ = -1;
};

}  // namespace saker::policy::audit
