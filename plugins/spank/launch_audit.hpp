// The launch-time audit log: slurmstepd runs on the compute node and cannot write the
// controller's audit log, so each node keeps its own, DIR/NODE/launch-audit.log, in the
// same chained format (policies/audit.hpp; `saker-policy audit verify` reads it). Several
// slurmstepd processes of one node append to it at once: an exclusive flock() around
// "resume the chain, append one record, fsync" keeps the chain linear.
//
// Each append also rewrites the log's sealed head (policies/audit_head.hpp, no key: the
// nodes hold no secret), so `saker-policy audit verify` detects a deleted tail.
//
// What is recorded: every launch-time refusal, and every step that declares datasets
// beyond what slurmctld recorded for its job (srun --dataset inside an allocation).
#pragma once

#include <string>

#include "policies/audit.hpp"

namespace saker::spank {

std::string launch_audit_path(const std::string& dir, const std::string& node);

// Appends one record; returns "" or the problem (the caller logs it; a refusal stands
// whether or not it could be recorded).
std::string append_launch_record(const std::string& path, const policy::audit::Entry& entry);

}  // namespace saker::spank
