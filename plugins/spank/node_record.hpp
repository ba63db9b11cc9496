// What a node knows of a job without asking slurmctld: a record the job prolog writes.
//
// Why: the launch-time check (residency.hpp) needs the job's datasets, user and account
// from a source the user cannot forge, and must not cost one slurmctld RPC per step per
// node (slurm_load_job from every slurmstepd grows with node count). With
// PrologFlags=Alloc, slurmctld sends the prolog to every node of an allocation with the
// job's control environment (SPANK_SAKER_DATASETS, as job_submit judged it) and
// SLURM_JOB_USER/UID/ACCOUNT from the job record; srun plays no part. The prolog (as
// root, spank job_prolog) writes DIR/NODE/job-ID (mode 0600, atomically); every task
// start on that node reads it; the epilog removes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policies/dataset_ref.hpp"

namespace saker::spank {

struct NodeRecord {
  std::uint32_t job_id = 0;
  std::uint32_t uid = 0;
  std::string user;
  std::string account;
  std::vector<policy::DatasetRef> datasets;
  std::string problem;  // non-empty: the job's dataset list was malformed; refuse its tasks
  // The launch check of `datasets` done once by the prolog, valid while the policy file
  // is the same (policy_id: its mtime, size and inode): steps that declare nothing more
  // then cost a stat() and this file's read instead of a policy load each.
  std::string verdict;          // "" (not checked), "allow" or "deny"
  std::string verdict_message;  // the refusal or the audit-mode note
  std::string policy_id;
  // "encrypt" when the verdict's datasets demand encrypted transit (a classification's
  // transit: encrypt), else "".
  std::string transit;
  // For the job attestation (attestation_hook.hpp), from the prolog's environment and the
  // policy, as root: SLURM_JOB_PARTITION, SLURM_JOB_NODELIST, this node's zone and the
  // policy's revision. Empty in a record an older prolog wrote.
  std::string partition, nodes, zone, policy_revision;
  // SLURM_JOB_RESTART_COUNT of the prolog: which run of a requeued job this is, from
  // slurmctld (slurmstepd's own item says 0 for a requeued batch step in Slurm 22.05). The
  // OpenLineage events tell a requeued job's runs apart by it (lineage_hook.hpp).
  std::uint32_t restart_count = 0;
};

// The identity of a policy file for the cache above ("" when it cannot be stat()ed).
std::string policy_file_id(const std::string& path);

std::string format_node_record(const NodeRecord& r);
// Throws saker::Error on a record that does not parse (a launch then refuses).
NodeRecord parse_node_record(const std::string& text);

// DIR/NODE/job-ID; NODE and ID are checked (no '/', no "..").
std::string node_record_path(const std::string& dir, const std::string& node, std::uint32_t job_id);

// Builds the record from a prolog's environment (getenv-like lookup).
template <typename Getenv>
NodeRecord node_record_from_env(std::uint32_t job_id, Getenv get);

void write_node_record(const std::string& path, const NodeRecord& r);  // throws saker::Error
std::optional<NodeRecord> read_node_record(const std::string& path);  // nullopt: no file; throws on a bad one

// read_node_record for the hooks of one step: slurmstepd runs a single step, and its
// residency check, attestation and telemetry each need the same record, so the file is
// read and parsed once per process and path; a later call gets the same record, or the
// same error thrown again (a hook that fails closed on it still does).
std::optional<NodeRecord> read_step_node_record(const std::string& path);

}  // namespace saker::spank

#include "plugins/spank/node_record_env.hpp"
