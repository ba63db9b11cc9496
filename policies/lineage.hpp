// The reverse question of issue 30 (erasure and restriction requests): which jobs were
// admitted with dataset X (version Y)? Answered from audit logs whose chains the caller
// has verified: the controller's (submit and modify decisions) and the nodes' launch logs
// (spank_saker.so's re-check at task start, which also carries the job id that Slurm had
// not assigned yet when job_submit ran).
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "saker/dataset_ref.hpp"

namespace saker::policy::lineage {

struct Row {
  std::string log;             // the audit log it came from
  std::uint64_t record = 0;    // the record's id in that log
  std::string time, event, decision;
  std::string job_id;          // "" when job_submit ran before Slurm assigned one
  std::string user, account, partition, nodes;
  std::vector<std::string> datasets;  // the job's datasets that match the query, as recorded
  bool version_unpinned = false;      // the query names a version, the job named none
};

// The records of one log that admitted a job (submit or modify: allow or route; launch:
// allow) with a dataset matching `query`: NAME matches every version; NAME@V matches V
// and, flagged version_unpinned, a job that named no version (it may have read V).
// Denied jobs never ran and are not listed. Lines that are not records are skipped (the
// caller verified the chain first).
std::vector<Row> admitted_with(const std::string& log_name, std::istream& in, const DatasetRef& query);

// A plain table, one row per record, with a header; "no job ..." when there is none.
std::string table(const DatasetRef& query, const std::vector<Row>& rows);
// {"dataset":"...","jobs":[{...}]}
std::string json(const DatasetRef& query, const std::vector<Row>& rows);

}  // namespace saker::policy::lineage
