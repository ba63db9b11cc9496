// Saker's data-residency, data-locality, access and GPU policy: the public API.
//
// A site writes one YAML policy (man 5 saker-policy.yaml). Policy::load_file() parses
// and validates it once and compiles it into an immutable object; every question after
// that (may this job run, where, may this task start on this node, may this checkpoint
// be written there) is a cheap, thread-safe const call on that object.
//
// Users: job_submit_saker.so (evaluate), spank_saker.so (check_launch_access), libsaker_ckpt
// (check_checkpoint_destination, encryption_required), saker-policy (everything).
// This header is stable: additions only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "saker/error.hpp"
#include "saker/dataset_ref.hpp"  // DatasetRef, parse_dataset_list, kDatasetsEnvName

namespace saker::policy {

// A policy file that does not load. what() reads "FILE:LINE:COLUMN: problem; expected ...".
class LoadError : public saker::Error {
 public:
  LoadError(std::string file, int line, int column, const std::string& problem, const std::string& expected);
  const std::string& file() const { return file_; }
  int line() const { return line_; }      // 1-based; 0 when the error is about the whole file
  int column() const { return column_; }  // 1-based
 private:
  std::string file_;
  int line_;
  int column_;
};

// Each rule runs in one of these modes. audit: the job is allowed and the decision
// records what WOULD have been denied.
enum class Mode { enforce, audit };

// What a job asks for, as job_submit sees it (or as `saker-policy explain` is told).
struct JobRequest {
  std::uint32_t uid = 0;
  std::string user;                 // login name
  std::vector<std::string> groups;  // Unix group names; only consulted by group grants
  std::string account;
  std::string partition;            // as requested: "", "p", or "p1,p2"
  std::string features;             // Slurm constraint expression as requested, "" for none
  std::vector<DatasetRef> datasets;
  std::uint32_t gpus = 0;           // total GPUs for the job (0: none)
  std::uint32_t gpus_per_task = 0;  // 0: not given
  std::uint32_t ntasks = 0;         // 0: not given
  std::uint32_t nodes = 0;          // 0: not given
  std::uint32_t job_id = 0;         // 0: not known yet (job_submit)
  // job_modify: re-check only where the job may run (residency, GPU placement, locality);
  // access grants were decided at submission, and an update carries no user/account.
  bool placement_only = false;
};

// Who runs a task, for the access rule (grants), as Slurm recorded the job: never from
// the task's environment.
struct Identity {
  std::uint32_t uid = 0;
  std::string user;                 // login name
  std::vector<std::string> groups;  // Unix group names; only consulted by group grants
  std::string account;
};

enum class DecisionKind { allow, modify, deny };
const char* to_string(DecisionKind kind);

struct Decision {
  DecisionKind kind = DecisionKind::allow;
  // For modify: the partition (or comma list) to set; empty means leave it as is.
  std::string partition;
  // For modify: features to AND into the job's constraint (data locality).
  std::vector<std::string> added_features;
  // Why: one sentence per rule that fired (denials name what was violated and where
  // the job WOULD be allowed; modifications say what changed and why).
  std::vector<std::string> reasons;
  // Audit-mode rules that would have denied the job ("would deny: ...").
  std::vector<std::string> would_deny;

  // The constraint expression to set on the job: `requested` with added_features ANDed in.
  std::string features_after(const std::string& requested) const;
  // One text for the user (sbatch: error: ...), reasons joined by "; ".
  std::string message() const;
};

// The answer to a yes/no question with its explanation (empty message when allowed
// and there is nothing to say).
struct Verdict {
  bool allowed = true;
  std::string message;
  explicit operator bool() const { return allowed; }
};

// Counts for `saker-policy check` and log lines.
struct Summary {
  int schema_version = 0;
  std::size_t zones = 0, partitions = 0, node_sets = 0, storage = 0, datasets = 0, grants = 0, gpu_limits = 0;
};

// Whether Slurm constraint `expression` already requires feature `f` on every node (f is
// one of its AND-ed names, exactly). Used by locality: otherwise the replica's feature is added.
bool requires_feature(std::string_view expression, std::string_view f);

// What the loader accepts before it parses anything: a hostile or broken file is
// refused in milliseconds (file:line:column), never after libyaml has gone quadratic.
struct LoadLimits {
  std::size_t max_bytes = 4u << 20;        // the whole file
  int max_depth = 32;                      // nested lists/mappings, block or flow form
  std::size_t max_scalar_bytes = 64u << 10;  // one value or key
};

class Policy {
 public:
  // Parses, validates and compiles. Throws LoadError (file:line:column) on any problem:
  // unknown keys, dangling references, duplicates, bad globs or hostlists, bad values,
  // and anything over `limits`.
  static std::shared_ptr<const Policy> load_file(const std::string& path, const LoadLimits& limits = {});
  // The same from text already in memory; `name` stands in for the file name in errors.
  static std::shared_ptr<const Policy> load_string(std::string_view yaml, const std::string& name = "<policy>",
                                                   const LoadLimits& limits = {});

  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // SHA-256 (hex) of the compiled policy's canonical form: equal policies, equal hash,
  // whatever the YAML's layout or comments.
  const std::string& revision() const;
  const std::string& source() const;  // file name it was loaded from
  Summary summary() const;

  // The decision job_submit applies.
  Decision evaluate(const JobRequest& request) const;

  // The zone of a node by name (from partitions and node sets); nullopt when unknown.
  std::optional<std::string> zone_of_node(std::string_view node_name) const;

  // Launch-time re-check (spank_saker.so, remote context): may a task reading these
  // datasets run on this node? A refusal names the node, its zone, the dataset and its
  // allowed zones. Unknown datasets follow the unknown-datasets rule; audit-mode rules
  // allow with a "would deny" message.
  Verdict check_launch(std::string_view node_name, const std::vector<DatasetRef>& datasets) const;

  // The whole launch-time check of access: check_launch's zones, and the grants the
  // datasets' classifications require (evaluate's access rule) for `who`. No partitions,
  // no routing, no GPU or locality rules: the job is already placed. A refusal is the
  // first enforced one (unknown datasets, then zones, then grants); audit-mode rules allow
  // with their "would deny" notes as the message.
  Verdict check_launch_access(std::string_view node_name, const std::vector<DatasetRef>& datasets,
                              const Identity& who) const;

  // May a checkpoint of a model trained on these datasets (its lineage) be written to
  // `path`? The path's storage system is found by its mount points (longest prefix).
  // Refused when that storage system's zone is outside a dataset's allowed zones, and
  // when the path is on no known storage system while a dataset is residency-restricted
  // or requires a grant.
  Verdict check_checkpoint_destination(const std::string& path, const std::vector<DatasetRef>& lineage) const;

  // True when any dataset of the lineage has a classification for which the policy
  // requires encrypted checkpoints.
  bool encryption_required(const std::vector<DatasetRef>& lineage) const;
  // True when any of the job's datasets has a classification with transit: encrypt: its
  // ranks' traffic between nodes must be AES-256-GCM sealed (spank_saker(8) sets
  // SAKER_COMM_TRANSIT_REQUIRED=encrypt in the tasks' environment).
  bool transit_encryption_required(const std::vector<DatasetRef>& datasets) const;

  struct Impl;
  explicit Policy(std::unique_ptr<Impl> impl);
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

using PolicyPtr = std::shared_ptr<const Policy>;

}  // namespace saker::policy
