#include "plugins/spank/node_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string_view>

#include "common/error.hpp"
#include "common/file.hpp"

namespace saker::spank {

namespace {

bool safe_name(const std::string& s) { return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\n') == std::string::npos; }

std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

}  // namespace

std::string format_node_record(const NodeRecord& r) {
  return "saker-node-record 1\n"
         "job_id=" + std::to_string(r.job_id) + "\n" +
         "uid=" + std::to_string(r.uid) + "\n" +
         "user=" + one_line(r.user) + "\n" +
         "account=" + one_line(r.account) + "\n" +
         "datasets=" + policy::format_dataset_list(r.datasets) + "\n" +
         "problem=" + one_line(r.problem) + "\n" +
         "verdict=" + one_line(r.verdict) + "\n" +
         "verdict_message=" + one_line(r.verdict_message) + "\n" +
         "policy_id=" + one_line(r.policy_id) + "\n" +
         "transit=" + one_line(r.transit) + "\n" +
         "partition=" + one_line(r.partition) + "\n" +
         "nodes=" + one_line(r.nodes) + "\n" +
         "zone=" + one_line(r.zone) + "\n" +
         "policy_revision=" + one_line(r.policy_revision) + "\n" +
         "restart_count=" + std::to_string(r.restart_count) + "\n";
}

// Plain string splitting, not std::istringstream: every task start reads a record, and
// an iostream would build the C++ locale in slurmstepd first (common/file.hpp).
NodeRecord parse_node_record(const std::string& text) {
  std::string_view rest(text);
  auto next_line = [&rest](std::string_view& line) {
    if (rest.empty()) return false;
    const auto nl = rest.find('\n');
    line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return true;
  };
  std::string_view line;
  if (!next_line(line) || line != "saker-node-record 1")
    throw Error("node record: not a saker node record (first line '" + std::string(line) + "')");
  NodeRecord r;
  int seen = 0;
  while (next_line(line)) {
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) throw Error("node record: line without '=': " + std::string(line));
    const std::string_view key = line.substr(0, eq);
    const std::string value(line.substr(eq + 1));
    ++seen;
    if (key == "job_id") r.job_id = static_cast<std::uint32_t>(std::stoul(value));
    else if (key == "uid") r.uid = static_cast<std::uint32_t>(std::stoul(value));
    else if (key == "user") r.user = value;
    else if (key == "account") r.account = value;
    else if (key == "datasets") r.datasets = value.empty() ? std::vector<policy::DatasetRef>{} : policy::parse_dataset_list(value);
    else if (key == "problem") r.problem = value;
    else if (key == "verdict") r.verdict = value;
    else if (key == "verdict_message") r.verdict_message = value;
    else if (key == "policy_id") r.policy_id = value;
    else if (key == "transit") r.transit = value;
    else if (key == "partition") r.partition = value;
    else if (key == "nodes") r.nodes = value;
    else if (key == "zone") r.zone = value;
    else if (key == "policy_revision") r.policy_revision = value;
    else if (key == "restart_count") r.restart_count = static_cast<std::uint32_t>(std::stoul(value));
    else throw Error("node record: unknown key '" + std::string(key) + "'");
  }
  // A record of the previous format (9 fields, no transit) was written by the prolog of a
  // job that started before an upgrade: its cached verdict says nothing of transit, so
  // drop it and let the step check the policy itself.
  if (seen == 9 && r.transit.empty()) r.verdict.clear(), r.verdict_message.clear(), r.policy_id.clear();
  // 10 fields: a record of the release before the attestation's four (partition, nodes,
  // zone, policy_revision), which then stay empty; 14: before restart_count (then 0).
  else if (seen != 10 && seen != 14 && seen != 15)
    throw Error("node record: " + std::to_string(seen) + " fields, expected 15 (a truncated file?)");
  return r;
}

std::string policy_file_id(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(st.st_ino);
}

std::string node_record_path(const std::string& dir, const std::string& node, std::uint32_t job_id) {
  if (!safe_name(node)) throw Error("node record: unusable node name '" + node + "'");
  return dir + "/" + node + "/job-" + std::to_string(job_id);
}

void write_node_record(const std::string& path, const NodeRecord& r) {
  const std::string node_dir = path.substr(0, path.rfind('/'));
  const std::string dir = node_dir.substr(0, node_dir.rfind('/'));
  for (const std::string& d : {dir, node_dir})
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error("node record: cannot create " + d + ": " + std::strerror(errno));
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw Error("node record: cannot create " + tmp + ": " + std::strerror(errno));
  const std::string text = format_node_record(r);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error("node record: cannot write " + path + ": " + std::strerror(errno));
  }
}

std::optional<NodeRecord> read_node_record(const std::string& path) {
  const auto text = file::read(path);
  if (!text) {
    if (errno == ENOENT) return std::nullopt;
    throw Error("node record: cannot read " + path + ": " + std::strerror(errno));
  }
  return parse_node_record(*text);
}

std::optional<NodeRecord> read_step_node_record(const std::string& path) {
  struct Cached {
    std::string path;
    std::optional<NodeRecord> record;
    std::string error;  // non-empty: reading it threw this
  };
  static std::optional<Cached> cached;
  if (!cached || cached->path != path) {
    Cached c{path, std::nullopt, ""};
    try {
      c.record = read_node_record(path);
    } catch (const std::exception& e) {
      c.error = e.what();
    }
    cached = std::move(c);
  }
  if (!cached->error.empty()) throw Error(cached->error);
  return cached->record;
}

}  // namespace saker::spank
