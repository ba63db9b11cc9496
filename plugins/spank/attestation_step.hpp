// The job attestation's facts and file, on the node (no SPANK calls here, so unit tests
// run it): spank_saker.so signs one per step per node (attestation_hook.hpp).
//
// Where each fact comes from, and why the task cannot bend it:
//  - job, step and array ids: slurmstepd's own items (spank_get_item), not the task env;
//  - user, uid, account, partition, nodes and the datasets: the node record the job
//    prolog wrote as root from what slurmctld sent (node_record.hpp): the datasets are the
//    list job_submit judged and admitted, never what the task's environment or an srun
//    flag of the step declares;
//  - zone and policy revision: the site policy, read by the prolog as root;
//  - the audit-log head: the sealed head of a root-only log (policies/audit_head.hpp).
// The file goes into DIR/NODE/ (root's, mode 0711: reachable, not listable), owned by root,
// mode 0440 and group the job's: its tasks read it, nobody but root writes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plugins/spank/node_record.hpp"
#include "provenance/attestation.hpp"
#include "provenance/site_key.hpp"

namespace saker::spank {

struct StepIds {
  std::uint32_t job_id = 0, step_id = 0;
  // Not an array task: array_job_id 0, or array_task_id NO_VAL (as slurmstepd says it).
  std::uint32_t array_job_id = 0, array_task_id = 0;
};

// "0", "1", ..., "batch", "extern", "interactive" (Slurm's names for its special steps).
std::string step_name(std::uint32_t step_id);

// The audit head as "ID:HASH", or "" when the log has no readable head.
std::string audit_head_text(const std::string& log_path);

provenance::Attestation build_attestation(const StepIds& ids, const NodeRecord& record, const std::string& node,
                                          const std::string& audit_log, std::int64_t now_unix);

// DIR/NODE/job-J.S.att (NODE and the ids checked like node_record_path).
std::string attestation_path(const std::string& dir, const std::string& node, std::uint32_t job_id, const std::string& step);

// Writes `text` at `path` (creating DIR and DIR/NODE 0711 as needed), owned by uid 0 (or
// the caller's uid when not root: tests) and `gid`, mode 0440; nobody but root reads it
// before it is whole, and one already there is replaced atomically. "" or the problem.
std::string write_attestation_file(const std::string& path, const std::string& text, std::uint32_t gid);

// STATE/NODE/attest-key.pub, beside the node records (root's, mode 0700): the site key's
// public half and the key file's identity when a step on this node last derived it. Each
// step reads the private key from its file and takes this public key instead of deriving
// it again (a scalar multiplication, as costly as the signature: issue 30) while the file
// is the same one and the note's binding matches the seed (provenance/site_key.hpp
// KnownPublicKey). The note is believed only as a regular file of this daemon's user that
// nobody else may read or write.
std::string known_key_path(const std::string& state_dir, const std::string& node);
// nullopt when there is none, it is not root's own 0600 file or it does not parse (the
// step then derives the key).
std::optional<provenance::KnownPublicKey> read_known_key(const std::string& path);
// Atomically, mode 0600, into an existing directory (the prolog makes it). "" or the problem.
std::string write_known_key(const std::string& path, const provenance::SiteKey& key);

// The job epilog's clean-up: every DIR/NODE/job-J.* file. Returns how many were removed.
int remove_job_attestations(const std::string& dir, const std::string& node, std::uint32_t job_id);

}  // namespace saker::spank
