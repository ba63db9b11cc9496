// The audit log's sealed head: LOG.head holds the number of the last record, its hash and
// the log's length, written atomically (temporary file, fsync, rename) after every append.
// The hash chain alone cannot show that the last lines, or the whole tail, were deleted:
// the shortened log is still a valid chain. Compared with the head, it is not.
//
// What it protects against (saker-policy(1), AUDIT TRAIL):
//  - without a key: a truncated or tail-deleted log, an edited line, a log restored from
//    an older copy; someone who can rewrite both files consistently is not stopped;
//  - with a key (audit_key= in job_submit_saker.conf, readable by SlurmUser only), the
//    head carries an HMAC-SHA-256 of its fields: an attacker who can write the log and
//    the head but cannot read the key cannot make a shortened or rewritten log verify.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace saker::policy::audit {

struct Head {
  std::uint64_t last_id = 0;  // id of the last record (0: empty log)
  std::string last_hash;      // its hash (64 zeros for an empty log)
  std::uint64_t log_bytes = 0;
};

std::string head_path(const std::string& log_path);

// The head file's single line for these fields (with "mac" when key is not empty).
std::string head_line(const Head& head, const std::string& key);

// Writes LOG.head atomically. Returns "" or a problem text (the log itself is intact).
std::string write_head(const std::string& log_path, const Head& head, const std::string& key);

// Reads LOG.head. Returns nullopt and sets `problem` when it is missing, unreadable,
// malformed, or (with a key) its MAC does not match.
std::optional<Head> read_head(const std::string& log_path, const std::string& key, std::string& problem);

// Reads a key file (the whole file's bytes). Throws saker::Error naming the file.
std::string read_key_file(const std::string& path);

}  // namespace saker::policy::audit
