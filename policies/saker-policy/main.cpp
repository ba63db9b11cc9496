// saker-policy: check a policy, explain the decision job_submit_saker.so would make,
// and verify or show the audit trail. See saker-policy(1).
#include <boost/program_options.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "common/version.hpp"
#include "policies/audit.hpp"
#include "policies/audit_head.hpp"
#include "saker/policy.hpp"

namespace po = boost::program_options;
using namespace saker::policy;

namespace {

// Exit codes (documented in saker-policy(1)).
constexpr int kOk = 0;           // valid / allowed (allow or modify) / log intact
constexpr int kDenied = 1;       // explain: the job would be denied; audit verify: tampering found
constexpr int kUsage = 2;        // bad command line
constexpr int kBadPolicy = 3;    // the policy does not load
constexpr int kIoError = 3;      // a file cannot be read (saker(7): an unusable input is 3)

// A file that cannot be read (exit 4).
struct IoError : saker::Error {
  using saker::Error::Error;
};

const char* kUsageText =
    "Usage:\n"
    "  saker-policy check POLICY [--max-bytes N]\n"
    "  saker-policy explain --policy P --user U [--account A] [--group G]... [--partition X]\n"
    "                       [--dataset D[@V][,...]] [--gpus N] [--gpus-per-task N] [--ntasks N] [--nodes N]\n"
    "                       [--features F] [--node NODE] [--max-bytes N]\n"
    "  saker-policy audit verify FILE [--key KEYFILE] [--no-head]\n"
    "  saker-policy audit show FILE [--last N]\n"
    "  saker-policy --help | --version\n"
    "\n"
    "Exit codes: 0 valid / allowed / intact, 1 denied (explain) or tampered (audit verify),\n"
    "2 usage error, 3 a file cannot be read or the policy does not load (see saker(7)).\n";

// A policy file that cannot be read is an I/O problem (exit 4), not a bad policy (3).
std::shared_ptr<const Policy> load(const std::string& path, const LoadLimits& limits) {
  if (::access(path.c_str(), R_OK) != 0)
    throw IoError(saker::explain("cannot read the policy file " + path, std::strerror(errno),
                                 "check the path and its permissions"));
  return Policy::load_file(path, limits);
}

int check(const std::vector<std::string>& args) {
  po::options_description o("check options");
  std::vector<std::string> files;
  LoadLimits limits;
  o.add_options()("max-bytes", po::value(&limits.max_bytes), "largest policy file accepted (default 4 MiB)")(
      "file", po::value(&files), "policy file");
  po::positional_options_description pos;
  pos.add("file", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).positional(pos).run(), vm);
  po::notify(vm);
  if (files.size() != 1) { std::cerr << "saker-policy check: name one POLICY file\n" << kUsageText; return kUsage; }
  const auto p = load(files[0], limits);
  const Summary s = p->summary();
  std::cout << files[0] << ": valid (schema version " << s.schema_version << ")\n"
            << "  revision:   " << p->revision() << "\n"
            << "  zones: " << s.zones << ", partitions: " << s.partitions << ", node sets: " << s.node_sets
            << ", storage systems: " << s.storage << "\n"
            << "  datasets: " << s.datasets << ", grants: " << s.grants << ", GPU limits: " << s.gpu_limits << "\n";
  return kOk;
}

int explain(const std::vector<std::string>& args) {
  po::options_description o("explain options");
  std::string policy_path, datasets, node;
  std::vector<std::string> groups;
  LoadLimits limits;
  JobRequest q;
  o.add_options()("policy", po::value(&policy_path)->required(), "policy file")(
      "user", po::value(&q.user)->required(), "user name")("account", po::value(&q.account), "account")(
      "group", po::value(&groups), "Unix group of the user (repeatable)")(
      "partition", po::value(&q.partition), "partition or comma list; empty: the default")(
      "dataset", po::value(&datasets), "datasets NAME[@VERSION][,...]")("gpus", po::value(&q.gpus), "GPUs for the job")(
      "gpus-per-task", po::value(&q.gpus_per_task), "GPUs per task")("ntasks", po::value(&q.ntasks), "tasks")(
      "nodes", po::value(&q.nodes), "nodes")("features", po::value(&q.features), "constraint expression")(
      "node", po::value(&node), "also run the launch-time check for this node")(
      "max-bytes", po::value(&limits.max_bytes), "largest policy file accepted (default 4 MiB)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).run(), vm);
  po::notify(vm);
  q.groups = groups;
  if (!datasets.empty()) q.datasets = parse_dataset_list(datasets);
  const auto p = load(policy_path, limits);
  const Decision d = p->evaluate(q);
  if (q.datasets.empty()) std::cout << "datasets: none declared\n";
  std::cout << "decision: " << to_string(d.kind) << "\n";
  if (!d.partition.empty()) std::cout << "partition: " << d.partition << "\n";
  if (!d.added_features.empty()) std::cout << "features: " << d.features_after(q.features) << "\n";
  for (const auto& r : d.reasons) std::cout << "reason: " << r << "\n";
  for (const auto& w : d.would_deny) std::cout << "audit: " << w << "\n";
  if (!q.datasets.empty() && d.kind != DecisionKind::deny)
    std::cout << "transit: " << (p->transit_encryption_required(q.datasets) ? "encrypt (required by the datasets' classification)" : "auth")
              << "\n";
  std::cout << "policy revision: " << p->revision() << "\n";
  int rc = d.kind == DecisionKind::deny ? kDenied : kOk;
  if (!node.empty()) {
    const Verdict v = p->check_launch(node, q.datasets);
    std::cout << "launch on " << node << ": " << (v.allowed ? "allowed" : "refused")
              << (v.message.empty() ? "" : ": " + v.message) << "\n";
    if (!v.allowed) rc = kDenied;
  }
  return rc;
}

int audit_verify(const std::vector<std::string>& args) {
  po::options_description o("audit verify options");
  std::vector<std::string> files;
  std::string key_file;
  o.add_options()("key", po::value(&key_file), "the sealed head's MAC key (audit_key= of job_submit_saker.conf)")(
      "no-head", "accept a log without a sealed head (logs written before Saker sealed them)")(
      "file", po::value(&files), "audit log");
  po::positional_options_description pos;
  pos.add("file", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).positional(pos).run(), vm);
  po::notify(vm);
  if (files.size() != 1) { std::cerr << "saker-policy audit verify: name one FILE\n" << kUsageText; return kUsage; }
  const std::string& file = files[0];
  if (::access(file.c_str(), R_OK) != 0) {
    std::cerr << "saker-policy: cannot read audit log " << file << ": " << std::strerror(errno) << "\n";
    return kIoError;
  }
  audit::VerifyOptions options;
  options.require_head = vm.count("no-head") == 0;
  if (!key_file.empty()) {
    try {
      options.key = audit::read_key_file(key_file);
    } catch (const saker::Error& e) {
      std::cerr << "saker-policy: " << e.what() << "\n";
      return kIoError;
    }
  }
  const auto r = audit::verify_file(file, options);
  // One line per problem, flushed as it is printed: a long report is never lost.
  for (const auto& p : r.problems) std::cout << file << ":" << p.line << ": " << p.what << std::endl;
  if (r.ok())
    std::cout << file << ": " << r.records << " records, chain intact"
              << (options.require_head ? ", sealed head matches" : "") << "\n";
  else std::cout << file << ": " << r.problems.size() << " problem(s) in " << r.records << " records\n";
  return r.ok() ? kOk : kDenied;
}

int audit_cmd(const std::vector<std::string>& args) {
  if (args.size() < 2 || (args[0] != "verify" && args[0] != "show")) {
    std::cerr << "saker-policy audit: use 'audit verify FILE' or 'audit show FILE'\n" << kUsageText;
    return kUsage;
  }
  if (args[0] == "verify") return audit_verify({args.begin() + 1, args.end()});
  std::ifstream in(args[1], std::ios::binary);
  if (!in) { std::cerr << "saker-policy: cannot read audit log " << args[1] << "\n"; return kIoError; }
  std::size_t last = 0;
  if (args.size() == 4 && args[2] == "--last") last = std::stoul(args[3]);
  else if (args.size() != 2) { std::cerr << kUsageText; return kUsage; }
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
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-policy")) return 0;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << "saker-policy: check Saker data policies, explain decisions, verify the audit trail.\n\n" << kUsageText;
    return args.empty() ? kUsage : kOk;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "check") return check(args);
    if (cmd == "explain") return explain(args);
    if (cmd == "audit") return audit_cmd(args);
    std::cerr << "saker-policy: unknown command '" << cmd << "'\n" << kUsageText;
    return kUsage;
  } catch (const IoError& e) {
    std::cerr << "saker-policy: " << e.what() << "\n";
    return kIoError;
  } catch (const LoadError& e) {
    std::cerr << "saker-policy: " << e.what() << "\n";
    return kBadPolicy;
  } catch (const po::error& e) {
    std::cerr << "saker-policy " << cmd << ": " << e.what() << "\n" << kUsageText;
    return kUsage;
  } catch (const std::exception& e) {
    std::cerr << "saker-policy " << cmd << ": " << e.what() << "\n";
    return kUsage;
  }
}
