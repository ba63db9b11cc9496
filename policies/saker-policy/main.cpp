// saker-policy: check a policy, explain the decision job_submit_saker.so would make,
// and verify or show the audit trail. See saker-policy(1).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "common/cli.hpp"
#include "policies/lineage.hpp"
#include "policies/model.hpp"
#include "policies/audit.hpp"
#include "policies/audit_head.hpp"
#include "saker/policy.hpp"

using namespace saker::policy;
namespace cli = saker::cli;

namespace {

// A file that cannot be read: exit 3, like a policy that does not load (saker(7)).
struct IoError : saker::Error {
  using saker::Error::Error;
};

const cli::Tool& tool() {
  static const cli::Option kMaxBytes{"max-bytes", "N", "largest policy file accepted (default 4 MiB)"};
  static const cli::Tool t{
      "saker-policy",
      "check Saker data policies, explain decisions, verify the audit trail",
      {{"check", "POLICY [--max-bytes N]", "load POLICY and print what it holds", {kMaxBytes}, 1, 1, "POLICY file"},
       {"explain",
        "--policy P --user U [--account A] [--group G]... [--partition X] [--dataset D[@V][,...]] [--gpus N] "
        "[--gpus-per-task N] [--ntasks N] [--nodes N] [--features F] [--node NODE] [--max-bytes N]",
        "the decision job_submit_saker.so would make for such a job (allow, route or deny), with its reasons",
        {{"policy", "P", "policy file"},
         {"user", "U", "user name"},
         {"account", "A", "account"},
         {"group", "G", "Unix group of the user (repeatable)", true},
         {"partition", "X", "partition or comma list; empty: the default"},
         {"dataset", "D[@V][,...]", "datasets NAME[@VERSION][,...]"},
         {"gpus", "N", "GPUs for the job"},
         {"gpus-per-task", "N", "GPUs per task"},
         {"ntasks", "N", "tasks"},
         {"nodes", "N", "nodes"},
         {"features", "F", "constraint expression"},
         {"node", "NODE", "also run the launch-time check for this node"},
         kMaxBytes},
        0, 0, ""},
       {"audit verify", "FILE [--key KEYFILE] [--no-head]", "check the audit log's hash chain and sealed head",
        {{"key", "KEYFILE", "the sealed head's MAC key (audit_key= of job_submit_saker.conf)"},
         {"no-head", "", "accept a log without a sealed head (logs written before Saker sealed them)"}},
        1, 1, "audit log FILE"},
       {"audit show", "FILE [--last N]", "print the audit records, one per line",
        {{"last", "N", "only the last N records"}}, 1, 1, "audit log FILE"},
       {"lineage", "--dataset NAME[@VERSION] LOG [--node-log FILE]... [--key KEYFILE] [--no-head] [--json]",
        "the jobs admitted with a dataset (erasure and restriction requests), from audit logs verified first",
        {{"dataset", "NAME[@VERSION]", "the dataset; without a version, every version"},
         {"node-log", "FILE", "a node's launch audit log (STATE_DIR/NODE/launch-audit.log; repeatable): "
                              "job ids and nodes of the jobs' tasks", true},
         {"key", "KEYFILE", "LOG's sealed-head MAC key (audit_key= of job_submit_saker.conf)"},
         {"no-head", "", "accept logs without a sealed head (written before Saker sealed them)"},
         {"json", "", "one JSON object instead of the table"}},
        1, 1, "controller audit LOG"}},
      "Exit codes (saker(7)): 0 valid / allowed (allow or route) / intact, 1 denied (explain) or tampered\n"
      "(audit verify), 2 usage error, 3 a file cannot be read or the policy does not load.\n"};
  return t;
}

LoadLimits limits_of(const cli::Args& a) {
  LoadLimits limits;
  limits.max_bytes = a.number("max-bytes", limits.max_bytes, 1);
  return limits;
}

// A file the command reads: it must exist, be readable and not be a directory.
void readable_file(const std::string& what, const std::string& path) {
  struct stat st {};
  if (::access(path.c_str(), R_OK) != 0 || ::stat(path.c_str(), &st) != 0)
    throw IoError(saker::explain("cannot read the " + what + " " + path, std::strerror(errno),
                                 "check the path and its permissions"));
  if (S_ISDIR(st.st_mode))
    throw IoError(saker::explain("cannot read the " + what + " " + path, "it is a directory", "name the file itself"));
}

std::shared_ptr<const Policy> load(const std::string& path, const LoadLimits& limits) {
  readable_file("policy file", path);
  return Policy::load_file(path, limits);
}

int check(const cli::Args& a) {
  const std::string& file = a.positional[0];
  const auto p = load(file, limits_of(a));
  const Summary s = p->summary();
  std::cout << file << ": valid (schema version " << s.schema_version << ")\n"
            << "  revision:   " << p->revision() << "\n"
            << "  zones: " << s.zones << ", partitions: " << s.partitions << ", node sets: " << s.node_sets
            << ", storage systems: " << s.storage << "\n"
            << "  datasets: " << s.datasets << ", grants: " << s.grants << ", GPU limits: " << s.gpu_limits << "\n";
  return cli::kOk;
}

// The word the documentation uses: job_submit routes a job (partition, features).
const char* decision_word(DecisionKind k) { return k == DecisionKind::modify ? "route" : to_string(k); }

// Partitions the job asks for that the policy does not know: it places no data rule on
// them, so "allow" says nothing about whether Slurm has them.
void note_unknown_partitions(const Policy& p, const std::string& partitions) {
  std::size_t from = 0;
  while (from <= partitions.size() && !partitions.empty()) {
    const std::size_t comma = partitions.find(',', from);
    const std::string name = partitions.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (!name.empty() && p.impl().find_partition(name) < 0)
      std::cout << "note: partition " << name << " is not in the policy: no data rule applies to it, and whether "
                << "Slurm has it is for slurmctld to say (sinfo -p " << name << ")\n";
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
}

JobRequest request_of(const cli::Args& a) {
  JobRequest q;
  q.user = a.required("user");
  q.account = a.get("account");
  q.groups = a.all("group");
  q.partition = a.get("partition");
  try {
    if (a.has("dataset")) q.datasets = parse_dataset_list(a.get("dataset"));
  } catch (const saker::Error& e) {  // names the bad entry and the syntax
    throw cli::UsageError(a.command + ": --dataset: " + e.what());
  }
  q.gpus = static_cast<decltype(q.gpus)>(a.number("gpus", q.gpus, 0, 1u << 20));
  q.gpus_per_task = static_cast<decltype(q.gpus_per_task)>(a.number("gpus-per-task", q.gpus_per_task, 0, 1u << 20));
  q.ntasks = static_cast<decltype(q.ntasks)>(a.number("ntasks", q.ntasks, 0, 1u << 24));
  q.nodes = static_cast<decltype(q.nodes)>(a.number("nodes", q.nodes, 0, 1u << 24));
  q.features = a.get("features");
  return q;
}

int explain(const cli::Args& a) {
  const std::string policy_path = a.required("policy");
  const JobRequest q = request_of(a);
  const auto p = load(policy_path, limits_of(a));
  const Decision d = p->evaluate(q);
  if (q.datasets.empty()) std::cout << "datasets: none declared\n";
  std::cout << "decision: " << decision_word(d.kind) << "\n";
  note_unknown_partitions(*p, q.partition);
  if (!d.partition.empty()) std::cout << "partition: " << d.partition << "\n";
  if (!d.added_features.empty()) std::cout << "features: " << d.features_after(q.features) << "\n";
  for (const auto& r : d.reasons) std::cout << "reason: " << r << "\n";
  for (const auto& w : d.would_deny) std::cout << "audit: " << w << "\n";
  if (!q.datasets.empty() && d.kind != DecisionKind::deny)
    std::cout << "transit: " << (p->transit_encryption_required(q.datasets) ? "encrypt (required by the datasets' classification)" : "auth")
              << "\n";
  std::cout << "policy revision: " << p->revision() << "\n";
  int rc = d.kind == DecisionKind::deny ? cli::kFailed : cli::kOk;
  if (a.has("node")) {
    const std::string node = a.get("node");
    const Verdict v = p->check_launch(node, q.datasets);
    std::cout << "launch on " << node << ": " << (v.allowed ? "allowed" : "refused")
              << (v.message.empty() ? "" : ": " + v.message) << "\n";
    if (!v.allowed) rc = cli::kFailed;
  }
  return rc;
}

int audit_verify(const cli::Args& a) {
  const std::string& file = a.positional[0];
  readable_file("audit log", file);
  audit::VerifyOptions options;
  options.require_head = !a.has("no-head");
  if (a.has("key")) options.key = audit::read_key_file(a.get("key"));  // its errors name the file: exit 3
  const auto r = audit::verify_file(file, options);
  // One line per problem, flushed as it is printed: a long report is never lost.
  for (const auto& p : r.problems) std::cout << file << ":" << p.line << ": " << p.what << std::endl;
  if (r.ok())
    std::cout << file << ": " << r.records << " records, chain intact"
              << (options.require_head ? ", sealed head matches" : "") << "\n";
  else std::cout << file << ": " << r.problems.size() << " problem(s) in " << r.records << " records\n";
  return r.ok() ? cli::kOk : cli::kFailed;
}

int audit_show(const cli::Args& a) {
  const std::string& file = a.positional[0];
  readable_file("audit log", file);
  std::ifstream in(file, std::ios::binary);
  const std::size_t last = a.number("last", 0, 1);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const std::size_t from = last > 0 && last < lines.size() ? lines.size() - last : 0;
  for (std::size_t i = from; i < lines.size(); ++i) {
    try {
      const auto fields = audit::parse_record(lines[i]);
      std::string out;
      for (const auto& [k, v] : fields)
        if (k != "prev" && k != "hash" && !v.empty() && v != "null") out += k + "=" + v + "  ";
      std::cout << out << "\n";
    } catch (const std::exception& e) {
      std::cout << "line " << i + 1 << ": " << e.what() << "\n";
    }
  }
  return cli::kOk;
}

// Verifies one log before anything of it is believed; a log that does not verify stops
// the answer (an erasure request answered from a tampered log would miss jobs).
void verify_or_refuse(const std::string& file, const std::string& key, bool require_head) {
  readable_file("audit log", file);
  audit::VerifyOptions options;
  options.key = key;
  options.require_head = require_head;
  const auto r = audit::verify_file(file, options);
  if (r.ok()) return;
  for (const auto& p : r.problems) std::cerr << file << ":" << p.line << ": " << p.what << "\n";
  throw cli::Failure(cli::kFailed,
                     saker::explain("saker-policy lineage: the audit log " + file + " does not verify (" +
                                        std::to_string(r.problems.size()) + " problem(s), above)",
                                    "an answer from a log that was edited or cut could miss jobs",
                                    "restore the log from a verified copy; saker-policy audit verify " + file));
}

int lineage(const cli::Args& a) {
  std::vector<DatasetRef> query;
  try {
    query = parse_dataset_list(a.required("dataset"));
  } catch (const saker::Error& e) {
    throw cli::UsageError(a.command + ": --dataset: " + e.what());
  }
  if (query.size() != 1)
    throw cli::UsageError(saker::explain(a.command + ": --dataset names " + std::to_string(query.size()) + " datasets",
                                         "the question is about one", "run it once per dataset"));
  const std::string key = a.has("key") ? audit::read_key_file(a.get("key")) : "";
  const bool require_head = !a.has("no-head");
  std::vector<lineage::Row> rows;
  const auto add = [&](const std::string& file, const std::string& file_key) {
    verify_or_refuse(file, file_key, require_head);
    std::ifstream in(file, std::ios::binary);
    auto more = lineage::admitted_with(file, in, query[0]);
    rows.insert(rows.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  };
  add(a.positional[0], key);
  for (const std::string& node_log : a.all("node-log")) add(node_log, "");  // node heads carry no MAC
  std::cout << (a.has("json") ? lineage::json(query[0], rows) : lineage::table(query[0], rows));
  return cli::kOk;
}

int run(const cli::Command& c, const cli::Args& a) {
  try {
    if (c.name == "check") return check(a);
    if (c.name == "explain") return explain(a);
    if (c.name == "audit verify") return audit_verify(a);
    if (c.name == "lineage") return lineage(a);
    return audit_show(a);
  } catch (const IoError& e) {
    throw cli::Failure(cli::kUnusable, a.command + ": " + e.what());
  } catch (const LoadError& e) {
    throw cli::Failure(cli::kUnusable, a.command + ": " + e.what());
  } catch (const cli::UsageError&) {
    throw;
  } catch (const cli::Failure&) {
    throw;
  } catch (const saker::Error& e) {  // a key file that cannot be used, and other inputs
    throw cli::Failure(cli::kUnusable, a.command + ": " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) { return cli::main(tool(), argc, argv, run, std::cout, std::cerr); }
