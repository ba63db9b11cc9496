#include "policies/audit.hpp"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include "common/hash.hpp"
#include "common/json.hpp"
#include "policies/audit_head.hpp"

namespace saker::policy::audit {

namespace {

constexpr std::string_view kHashKey = ",\"hash\":\"";
constexpr std::string_view kPrevKey = "\"prev\":\"";

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Splits a line into its sealed body and hash; false when the line is not a record.
struct Parts {
  std::string body;  // {"id":...,"prev":"..."}
  std::string hash;
  std::string prev;
  std::uint64_t id = 0;
};

bool split(const std::string& line, Parts& out) {
  const std::size_t suffix = kHashKey.size() + 64 + 2;
  if (line.size() < suffix + 10 || line.compare(line.size() - 2, 2, "\"}") != 0) return false;
  const std::size_t at = line.size() - suffix;
  if (line.compare(at, kHashKey.size(), kHashKey) != 0) return false;
  out.hash = line.substr(at + kHashKey.size(), 64);
  out.body = line.substr(0, at) + "}";
  if (!is_hex64(out.hash)) return false;
  // The body ends with "prev":"<64 hex>"}
  const std::size_t prev_at = out.body.size() - 1 - 1 - 64 - kPrevKey.size();
  if (out.body.size() < 80 || out.body.compare(prev_at, kPrevKey.size(), kPrevKey) != 0) return false;
  out.prev = out.body.substr(prev_at + kPrevKey.size(), 64);
  if (!is_hex64(out.prev)) return false;
  if (out.body.compare(0, 6, "{\"id\":") != 0) return false;
  std::size_t i = 6;
  if (i >= out.body.size() || std::isdigit(static_cast<unsigned char>(out.body[i])) == 0) return false;
  out.id = 0;
  for (; i < out.body.size() && std::isdigit(static_cast<unsigned char>(out.body[i])) != 0 && i < 26; ++i)
    out.id = out.id * 10 + static_cast<std::uint64_t>(out.body[i] - '0');
  return i < out.body.size() && out.body[i] == ',';
}

}  // namespace

std::string fields_json(const Entry& e) {
  json::Writer w;
  w.begin_object();
  w.key("time").value(utc_now()).key("event").value(e.event);
  w.key("uid").value(static_cast<std::uint64_t>(e.uid)).key("user").value(e.user).key("account").value(e.account);
  w.key("job_id");
  if (e.job_id.empty()) w.null();
  else w.value(e.job_id);
  w.key("partition").value(e.partition);
  w.key("nodes");
  if (e.nodes.empty()) w.null();
  else w.value(e.nodes);
  std::vector<std::string> datasets;
  for (const auto& d : e.datasets) datasets.push_back(d.str());
  w.key("datasets").strings(datasets);
  std::vector<std::string> reasons = e.reasons_extra;
  if (e.decision != nullptr) {
    w.key("decision").value(to_string(e.decision->kind));
    reasons.insert(reasons.begin(), e.decision->reasons.begin(), e.decision->reasons.end());
    w.key("new_partition").value(e.decision->partition).key("added_features").strings(e.decision->added_features);
    w.key("reasons").strings(reasons).key("would_deny").strings(e.decision->would_deny);
  } else {
    w.key("decision").value(e.decision_text).key("reasons").strings(reasons);
  }
  w.key("policy_revision").value(e.revision);
  w.end_object();
  const std::string& s = w.str();
  return s.substr(1, s.size() - 2);
}

std::string Chain::seal(const std::string& fields) {
  const std::uint64_t id = last_id_ + 1;
  std::string body = "{\"id\":" + std::to_string(id) + "," + fields + ",\"prev\":\"" + last_hash_ + "\"";
  const std::string hash = saker::hash::sha256_hex(body + "}");
  last_id_ = id;
  last_hash_ = hash;
  return body + ",\"hash\":\"" + hash + "\"}\n";
}

Chain Chain::resume(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return {};
  // The last line is short; read the tail only.
  const std::streamoff from = size > 65536 ? size - 65536 : 0;
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const std::size_t nl = tail.rfind('\n');
  const std::string last = nl == std::string::npos ? tail : tail.substr(nl + 1);
  Parts parts;
  if (!split(last, parts))
    throw Error(explain("audit log " + path + " does not end with a Saker audit record",
                        "its last line was cut or edited", "check it with `saker-policy audit verify " + path +
                        "`, then move it aside; a new log starts a new chain"));
  return Chain(parts.id, parts.hash);
}

VerifyResult verify(std::istream& in) {
  VerifyResult r;
  std::string line;
  std::uint64_t n = 0, prev_id = 0;
  std::string prev_hash = kGenesis;
  bool have_prev = false;
  while (std::getline(in, line)) {
    ++n;
    Parts p;
    if (!split(line, p)) {
      r.problems.push_back({n, "not a Saker audit record (edited, truncated or inserted by hand)"});
      have_prev = false;  // cannot chain past it; the next record's link is checked loosely
      continue;
    }
    ++r.records;
    const bool self_ok = saker::hash::sha256_hex(p.body) == p.hash;
    if (!self_ok) r.problems.push_back({n, "record id " + std::to_string(p.id) + " was edited: its hash does not match its content"});
    if (n == 1 && !have_prev) {
      if (p.id != 1 || p.prev != kGenesis)
        r.problems.push_back({n, "the log starts at record id " + std::to_string(p.id) + ": records 1.." +
                                     std::to_string(p.id - 1) + " before line 1 were deleted"});
    } else if (have_prev) {
      if (p.id <= prev_id)
        r.problems.push_back({n, "record id " + std::to_string(p.id) + " follows id " + std::to_string(prev_id) +
                                     ": lines were reordered, duplicated or inserted"});
      else if (p.id > prev_id + 1)
        r.problems.push_back({n, "records id " + std::to_string(prev_id + 1) +
                                     (p.id - 1 > prev_id + 1 ? ".." + std::to_string(p.id - 1) : std::string()) +
                                     " are missing before this line: deleted"});
      else if (p.prev != prev_hash && self_ok)
        r.problems.push_back({n, "record id " + std::to_string(p.id) + " does not chain to line " +
                                     std::to_string(n - 1) + ": that line was replaced or a record was inserted"});
    }
    prev_id = p.id;
    prev_hash = p.hash;
    have_prev = true;
    r.last_id = p.id;
    r.last_hash = p.hash;
  }
  r.lines = n;
  return r;
}

VerifyResult verify_file(const std::string& log_path, const VerifyOptions& options) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) throw Error(explain("cannot read audit log " + log_path, std::strerror(errno), "check the path"));
  VerifyResult r = verify(in);
  in.clear();
  in.seekg(0, std::ios::end);
  const auto bytes = static_cast<std::uint64_t>(in.tellg());
  const Chain end(r.last_id, r.last_hash);
  const std::uint64_t lines = r.lines;
  std::string problem;
  const auto head = read_head(log_path, options.key, problem);
  const std::uint64_t after = lines + 1;
  if (!head) {
    if (options.require_head || problem.find("no sealed head") == std::string::npos) r.problems.push_back({after, problem});
    return r;
  }
  if (head->last_id > end.last_id()) {
    r.problems.push_back({after, "records id " + std::to_string(end.last_id() + 1) +
                                     (head->last_id > end.last_id() + 1 ? ".." + std::to_string(head->last_id) : "") +
                                     " are missing at the end: the log was truncated or its tail deleted (the sealed "
                                     "head says it ended at id " + std::to_string(head->last_id) + ")"});
  } else if (head->last_id < end.last_id()) {
    r.problems.push_back({after, "records after id " + std::to_string(head->last_id) + " (up to id " +
                                     std::to_string(end.last_id()) + ") are not sealed: appended by hand, or written "
                                     "just before a crash (then the next start of the plugin seals them with a note)"});
  } else if (head->last_hash != end.last_hash()) {
    r.problems.push_back({after, "the last record (id " + std::to_string(end.last_id()) +
                                     ") is not the one that was sealed: the tail was replaced"});
  } else if (head->log_bytes != bytes) {
    r.problems.push_back({after, "the log has " + std::to_string(bytes) + " bytes, the sealed head says " +
                                     std::to_string(head->log_bytes) + ": something was cut or added after the last record"});
  }
  return r;
}

namespace {

// A small reader for the flat records this file writes: strings, numbers, null,
// booleans and arrays of those.
struct Reader {
  const std::string& s;
  std::size_t i = 0;
  [[noreturn]] void fail(const char* what) const {
    throw Error(explain("bad audit record", std::string(what) + " at character " + std::to_string(i + 1),
                        "check the log with `saker-policy audit verify`"));
  }
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])) != 0) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) { ++i; return true; }
    return false;
  }
  std::string string() {
    if (!eat('"')) fail("expected a string");
    std::string out;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') {
        if (++i >= s.size()) fail("bad escape");
        const char c = s[i++];
        switch (c) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (i + 4 > s.size()) fail("bad \\u escape");
            const unsigned code = static_cast<unsigned>(std::stoul(s.substr(i, 4), nullptr, 16));
            i += 4;
            if (code < 0x80) out += static_cast<char>(code);
            else out += '?';
            break;
          }
          default: out += c;
        }
      } else {
        out += s[i++];
      }
    }
    if (i >= s.size()) fail("unterminated string");
    ++i;
    return out;
  }
  std::string scalar() {
    ws();
    if (i < s.size() && s[i] == '"') return string();
    const std::size_t start = i;
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && std::isspace(static_cast<unsigned char>(s[i])) == 0) ++i;
    if (start == i) fail("expected a value");
    return s.substr(start, i - start);
  }
  std::string value() {
    if (!eat('[')) return scalar();
    std::string out;
    if (eat(']')) return out;
    do {
      if (!out.empty()) out += ", ";
      out += scalar();
    } while (eat(','));
    if (!eat(']')) fail("expected ']'");
    return out;
  }
};

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_record(const std::string& line) {
  Reader r{line};
  std::vector<std::pair<std::string, std::string>> out;
  if (!r.eat('{')) r.fail("expected '{'");
  if (r.eat('}')) return out;
  do {
    std::string key = r.string();
    if (!r.eat(':')) r.fail("expected ':'");
    out.emplace_back(std::move(key), r.value());
  } while (r.eat(','));
  if (!r.eat('}')) r.fail("expected '}'");
  return out;
}

}  // namespace saker::policy::audit
