// Where telemetry goes on disk: the per-job record file, the Prometheus textfile and
// the ranks' counter files. Everything here runs in the sampler, as root.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "telemetry/comm_counters.hpp"
#include "telemetry/record.hpp"

namespace saker::telemetry {

// Appends `block` to DIR/JOB.telemetry under an exclusive lock, so every node and step of
// the job adds to one file. A new file is created root:operators mode 0640 with a POSIX
// ACL entry letting `owner` read it (the job's user); where the file system has no ACLs
// the owner cannot read it and *warning says so. Throws saker::Error naming the file.
void append_record(const std::string& dir, const std::string& job, const std::string& block, uid_t owner,
                   gid_t operators, std::string* warning);

// The node_exporter textfile collector's file for one step on this node:
// DIR/saker_job_JOB_STEP_NODE.prom, written to a temporary name and renamed (the
// collector never reads half a file). Throws saker::Error.
std::string prometheus_path(const std::string& dir, const StepInfo& info);
void write_prometheus(const std::string& dir, const NodeStepRecord& r, bool running);
// The text itself (gauges labelled job_id, step, node, user, account).
std::string prometheus_text(const NodeStepRecord& r, bool running);
// Removes this node's saker_job_*.prom files last written more than keep_seconds ago.
void prune_prometheus(const std::string& dir, const std::string& node, double keep_seconds);

// The ranks' counter files in DIR (comm.RANK). Only regular files owned by `owner` (or
// root) of exactly the record's size, with the magic, version and their own rank, are
// read: the directory belongs to the job's user, and the reader is root.
std::vector<CommCounters> read_comm_counters(const std::string& dir, uid_t owner);

}  // namespace saker::telemetry
