// The decisions job_submit_saker.so makes, without Slurm's types: what a submission or
// an update asks for goes in, what slurmctld must do (refuse, or set which fields) and
// the audit record come out. The .so only translates job_desc_msg_t to and from these
// (job_submit_saker.cpp); everything here is unit-tested (tests/unit/job_submit_decide_test.cpp).
//
// Fail closed everywhere: no policy, a malformed dataset list or marker, a job the index
// does not know yet, an id that does not parse: a request that could move a job with
// datasets is refused, and the refusal is audited.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plugins/common/job_ref.hpp"
#include "plugins/job_submit/job_index.hpp"
#include "policies/audit.hpp"
#include "saker/policy.hpp"

namespace saker::job_submit {

// The policy to decide with, or null and why there is none.
struct PolicyView {
  policy::PolicyPtr policy;
  std::string why_none;
};

// What slurmctld must do, and what to record.
struct Outcome {
  bool refuse = false;
  std::string user_message;  // shown to the user where Slurm can (submit); "" for nothing
  std::string log_message;   // for slurmctld.log; "" for nothing
  std::optional<std::string> set_partition, set_features, set_admin_comment;
  bool audit = false;        // whether this decision goes to the audit log

  // The audit record's content.
  std::string event;         // "submit" or "modify"
  std::string job_ref;       // "" at submission (no id yet), else as the update named it
  std::string nodes;         // the job's nodes when known (a pending job has none: "")
  policy::JobRequest request;
  std::optional<policy::Decision> decision;
  std::string decision_text;  // when there is no policy decision: "deny" / "allow"
  std::vector<std::string> reasons;
  std::string revision;
  // The record; it points into this Outcome, which must outlive it.
  policy::audit::Entry audit_entry() const;
};

// A submission (sbatch, salloc, srun without an allocation, each het component).
// `admin_comment` is what the submitter put there (null for none).
Outcome decide_submit(const PolicyView& view, const policy::JobRequest& request, const char* admin_comment);

// A submission whose request could not even be built (e.g. a malformed dataset list).
Outcome refuse_malformed(const std::string& event, const policy::JobRequest& partial, const std::string& why);

// Het jobs: every component must declare the same datasets, because the batch script and
// --het-group steps of one component run on the nodes of the others. `first` is what
// component 0 declared (nullopt when the caller did not see component 0 in this request).
// Returns the refusal, or nullopt when the component may go on to decide_submit.
std::optional<Outcome> check_het_component(std::uint32_t offset, const std::optional<std::vector<policy::DatasetRef>>& first,
                                           const policy::JobRequest& request);

// An update (scontrol update, or a job's own change through the API).
struct Update {
  std::string ref_text;                     // the id as the update named it
  policy::JobRequest request;               // uid, user, and the placement fields the update sets
  bool partition_given = false;
  bool features_given = false;
  bool account_given = false;               // the update changes the account (grants are judged again)
  std::optional<std::string> admin_comment;  // set when the update changes admin_comment
  JobFacts facts;                           // what the index knows of the job
};
Outcome decide_modify(const PolicyView& view, const Update& update);

}  // namespace saker::job_submit
