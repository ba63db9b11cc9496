// Attacks on the audit trail, by class, against the sealed head: every line deleted
// (the last one included), every byte flipped, every truncation, every adjacent pair
// swapped, the head deleted or forged, and a writer restarted on a shortened log.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "policies/audit.hpp"
#include "policies/audit_head.hpp"
#include "policies/audit_log.hpp"

using namespace saker::policy;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

struct TempLog {
  std::string dir;
  std::string path;
  explicit TempLog(const std::string& key, int records = 6) {
    char tmpl[] = "/tmp/saker-seal-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    path = dir + "/audit.log";
    // Two writers in turn, as across a slurmctld restart.
    for (int round = 0; round < 2; ++round) {
      audit::Log log(path, key);
      for (int i = 0; i < records / 2; ++i) log.enqueue("\"event\":\"test\",\"n\":" + std::to_string(round * 10 + i));
      REQUIRE(log.flush().empty());
    }
  }
  ~TempLog() {
    std::remove(path.c_str());
    std::remove(audit::head_path(path).c_str());
    rmdir(dir.c_str());
  }
  std::string read() const {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write(const std::string& text) const { std::ofstream(path, std::ios::binary | std::ios::trunc) << text; }
  audit::VerifyResult verify(const std::string& key) const { return audit::verify_file(path, {key, true}); }
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l + "\n");
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l;
  return out;
}

}  // namespace

TEST_CASE("a sealed log verifies, keyed or not", "[policy][audit][seal]") {
  for (const std::string& key : {std::string(), kKey}) {
    TempLog log(key);
    const auto r = log.verify(key);
    INFO((r.problems.empty() ? "" : r.problems[0].what));
    CHECK(r.ok());
    CHECK(r.records == 6);
  }
}

TEST_CASE("deleting any line, the last one included, is detected", "[policy][audit][seal]") {
  TempLog log(kKey);
  const auto lines = split_lines(log.read());
  REQUIRE(lines.size() == 6);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto cut = lines;
    cut.erase(cut.begin() + static_cast<long>(i));
    log.write(join(cut));
    INFO("deleted line " << i + 1);
    CHECK_FALSE(log.verify(kKey).ok());
  }
  // The whole tail, and everything.
  for (std::size_t keep = 0; keep < lines.size(); ++keep) {
    log.write(join({lines.begin(), lines.begin() + static_cast<long>(keep)}));
    INFO("kept " << keep << " lines");
    const auto r = log.verify(kKey);
    REQUIRE_FALSE(r.ok());
    CHECK(r.problems.back().what.find("missing at the end") != std::string::npos);
  }
}

TEST_CASE("every truncation is detected", "[policy][audit][seal]") {
  TempLog log("");
  const std::string text = log.read();
  for (std::size_t size = 0; size < text.size(); ++size) {
    log.write(text.substr(0, size));
    INFO("truncated to " << size << " of " << text.size() << " bytes");
    CHECK_FALSE(log.verify("").ok());
  }
}

TEST_CASE("every flipped byte is detected", "[policy][audit][seal]") {
  TempLog log("");
  const std::string text = log.read();
  for (std::size_t at = 0; at < text.size(); ++at) {
    std::string bad = text;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    log.write(bad);
    INFO("flipped byte " << at << " ('" << text[at] << "')");
    CHECK_FALSE(log.verify("").ok());
  }
}

TEST_CASE("swapping any two adjacent lines is detected", "[policy][audit][seal]") {
  TempLog log("");
  const auto lines = split_lines(log.read());
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    auto swapped = lines;
    std::swap(swapped[i], swapped[i + 1]);
    log.write(join(swapped));
    INFO("swapped lines " << i + 1 << " and " << i + 2);
    CHECK_FALSE(log.verify("").ok());
  }
}

TEST_CASE("a deleted, stale or forged head is detected", "[policy][audit][seal]") {
  TempLog log(kKey);
  const std::string text = log.read();
  const auto lines = split_lines(text);
  // Deleted head: refused unless the caller accepts unsealed logs.
  std::remove(audit::head_path(log.path).c_str());
  auto r = log.verify(kKey);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].what.find("no sealed head") != std::string::npos);
  CHECK(audit::verify_file(log.path, {kKey, false}).ok());
  // Tail deleted and the head rewritten to match, without the key: the MAC does not match.
  log.write(join({lines.begin(), lines.end() - 1}));
  std::istringstream shortened(join({lines.begin(), lines.end() - 1}));
  const auto chain = audit::verify(shortened);
  const audit::Head forged{chain.last_id, chain.last_hash, text.size() - lines.back().size()};
  std::ofstream(audit::head_path(log.path)) << audit::head_line(forged, "");
  r = log.verify(kKey);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].what.find("carries no MAC") != std::string::npos);
  std::ofstream(audit::head_path(log.path)) << audit::head_line(forged, "another key of 32 bytes, not it!");
  r = log.verify(kKey);
  REQUIRE_FALSE(r.ok());
  CHECK(r.problems[0].what.find("does not match its MAC") != std::string::npos);
  // With the right key the same head is accepted: the key is what makes it proof.
  std::ofstream(audit::head_path(log.path)) << audit::head_line(forged, kKey);
  CHECK(log.verify(kKey).ok());
}

TEST_CASE("a writer restarted on a shortened log keeps the gap visible", "[policy][audit][seal]") {
  TempLog log("");
  const auto lines = split_lines(log.read());
  log.write(join({lines.begin(), lines.end() - 2}));  // ids 5 and 6 deleted
  {
    audit::Log writer(log.path);
    writer.enqueue("\"event\":\"after\"");
    REQUIRE(writer.flush().empty());
  }
  const auto r = log.verify("");
  REQUIRE_FALSE(r.ok());
  bool named = false;
  for (const auto& p : r.problems) named = named || p.what.find("records id 5..6 are missing") != std::string::npos;
  CHECK(named);
  CHECK(log.read().find("\"event\":\"head_mismatch\"") != std::string::npos);
}

TEST_CASE("records carry the job id in every form and the nodes", "[policy][audit]") {
  for (const std::string& id : std::vector<std::string>{"123", "123+1", "123_4"}) {
    audit::Entry e;
    e.event = "modify";
    e.job_id = id;
    e.nodes = "saker[1-2]";
    e.decision_text = "deny";
    const std::string json = audit::fields_json(e);
    CHECK(json.find("\"job_id\":\"" + id + "\"") != std::string::npos);
    CHECK(json.find("\"nodes\":\"saker[1-2]\"") != std::string::npos);
  }
  audit::Entry unknown;
  CHECK(audit::fields_json(unknown).find("\"job_id\":null") != std::string::npos);
}
