#include "policies/lineage.hpp"

#include <algorithm>
#include <map>

#include "common/json.hpp"
#include "policies/audit.hpp"

namespace saker::policy::lineage {

namespace {

// A recorded dataset list ("a@v1, b") split back into its entries.
std::vector<std::string> split_list(const std::string& joined) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from < joined.size()) {
    const std::size_t comma = joined.find(", ", from);
    out.push_back(joined.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 2;
  }
  return out;
}

bool admitted(const std::string& event, const std::string& decision) {
  if (event == "launch") return decision == "allow";
  return (event == "submit" || event == "modify") && (decision == "allow" || decision == "modify");
}

std::string field(const std::map<std::string, std::string>& f, const std::string& key) {
  const auto it = f.find(key);
  return it == f.end() || it->second == "null" ? "" : it->second;
}

}  // namespace

std::vector<Row> admitted_with(const std::string& log_name, std::istream& in, const DatasetRef& query) {
  std::vector<Row> rows;
  for (std::string line; std::getline(in, line);) {
    std::map<std::string, std::string> f;
    try {
      for (auto& [k, v] : audit::parse_record(line)) f[k] = std::move(v);
    } catch (const std::exception&) {
      continue;  // not a record: verify reported it
    }
    Row r;
    r.event = field(f, "event");
    r.decision = field(f, "decision");
    if (!admitted(r.event, r.decision)) continue;
    bool unpinned = false;
    for (const std::string& d : split_list(field(f, "datasets")))
      if (dataset_matches(d, query, &unpinned)) r.datasets.push_back(d);
    if (r.datasets.empty()) continue;
    r.version_unpinned = unpinned && std::none_of(r.datasets.begin(), r.datasets.end(), [&](const std::string& d) {
                           return d == query.str();
                         });
    r.log = log_name;
    r.record = std::stoull(field(f, "id").empty() ? "0" : field(f, "id"));
    r.time = field(f, "time");
    r.job_id = field(f, "job_id");
    r.user = field(f, "user");
    r.account = field(f, "account");
    r.partition = field(f, "new_partition").empty() ? field(f, "partition") : field(f, "new_partition");
    r.nodes = field(f, "nodes");
    if (r.decision == "modify") r.decision = "route";  // the documentation's word
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string table(const DatasetRef& query, const std::vector<Row>& rows) {
  if (rows.empty()) return "no job was admitted with " + query.str() + " in these logs\n";
  std::vector<std::vector<std::string>> cells{
      {"JOB", "EVENT", "DECISION", "TIME", "USER", "ACCOUNT", "PARTITION", "NODES", "DATASETS", "RECORD"}};
  for (const Row& r : rows) {
    std::string ds;
    for (const auto& d : r.datasets) ds += (ds.empty() ? "" : ",") + d;
    if (r.version_unpinned) ds += " (no version named)";
    cells.push_back({r.job_id.empty() ? "-" : r.job_id, r.event, r.decision, r.time, r.user,
                     r.account.empty() ? "-" : r.account, r.partition.empty() ? "-" : r.partition,
                     r.nodes.empty() ? "-" : r.nodes, ds, r.log + ":" + std::to_string(r.record)});
  }
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::string out;
  for (const auto& row : cells) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

std::string json(const DatasetRef& query, const std::vector<Row>& rows) {
  json::Writer w;
  w.begin_object().key("dataset").value(query.str()).key("jobs").begin_array();
  for (const Row& r : rows) {
    w.begin_object();
    w.key("job_id");
    if (r.job_id.empty()) w.null();
    else w.value(r.job_id);
    w.key("event").value(r.event).key("decision").value(r.decision).key("time").value(r.time);
    w.key("user").value(r.user).key("account").value(r.account).key("partition").value(r.partition);
    w.key("nodes").value(r.nodes).key("datasets").strings(r.datasets).key("version_unpinned").value(r.version_unpinned);
    w.key("log").value(r.log).key("record").value(r.record);
    w.end_object();
  }
  w.end_array().end_object();
  return w.str() + "\n";
}

}  // namespace saker::policy::lineage
