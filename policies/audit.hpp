// The audit trail: one JSON line per decision, chained by SHA-256 so that an edited,
// deleted, inserted or reordered line is detected (`saker-policy audit verify`).
//
// A line is {"id":N,<fields>,"prev":"<sha256 of the previous line's record>","hash":"<sha256>"}
// where hash = SHA-256 of the line's text up to (not including) ,"hash": followed by "}".
// The first record has id 1 and prev = 64 zeros.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "saker/policy.hpp"

namespace saker::policy::audit {

inline const std::string kGenesis(64, '0');

// What one decision record says (everything but id, prev and hash).
struct Entry {
  std::string event;  // "submit", "modify" or "launch"
  std::uint32_t uid = 0;
  std::string user;
  std::string account;
  std::string job_id;        // as Slurm prints it: "123", "123+1" (het), "123_4" (array); "": not known yet
  std::string partition;     // as requested
  std::string nodes;         // hostlist, when known (launch: the node)
  std::vector<DatasetRef> datasets;
  const Decision* decision = nullptr;
  std::string decision_text;  // used when decision is null (e.g. "deny" with no policy)
  std::vector<std::string> reasons_extra;
  std::string revision;       // policy revision, "" when none is loaded
};

// The record's fields as JSON members (no braces), with the current UTC time.
std::string fields_json(const Entry& entry);

// Assigns ids and chains hashes. Not thread-safe: one writer owns it.
class Chain {
 public:
  Chain() = default;
  Chain(std::uint64_t last_id, std::string last_hash) : last_id_(last_id), last_hash_(std::move(last_hash)) {}
  // Continues the chain of an existing log (reads its last line); a missing or empty
  // file starts a new chain. Throws saker::Error when the last line is not a record.
  static Chain resume(const std::string& path);
  // The complete line for these fields, newline included; advances the chain.
  std::string seal(const std::string& fields);
  std::uint64_t last_id() const { return last_id_; }
  const std::string& last_hash() const { return last_hash_; }

 private:
  std::uint64_t last_id_ = 0;
  std::string last_hash_ = kGenesis;
};

struct Problem {
  std::uint64_t line;  // 1-based
  std::string what;
};

struct VerifyResult {
  std::uint64_t records = 0;
  std::uint64_t lines = 0;
  std::uint64_t last_id = 0;   // the last line that is a record
  std::string last_hash = kGenesis;
  std::vector<Problem> problems;
  bool ok() const { return problems.empty(); }
};

// Checks the chain alone: edits, deletions, insertions and reordering between records.
VerifyResult verify(std::istream& in);

// Checks the chain and compares its end with the sealed head (audit_head.hpp): a deleted
// tail or truncation shows as a problem on line "after the last". `key` is the head's
// MAC key ("" when the log is sealed without one); require_head=false accepts a log that
// has no head file (older logs), and says so.
struct VerifyOptions {
  std::string key;
  bool require_head = true;
};
VerifyResult verify_file(const std::string& log_path, const VerifyOptions& options);

// A parsed record for `audit show`: its members as (key, text) in order; arrays are
// joined with ", ". Throws saker::Error on a line that is not a JSON object.
std::vector<std::pair<std::string, std::string>> parse_record(const std::string& line);

}  // namespace saker::policy::audit
