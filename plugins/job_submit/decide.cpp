#include "plugins/job_submit/decide.hpp"

#include <algorithm>

#include "plugins/common/dataset_marker.hpp"

namespace saker::job_submit {

namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : "; ") + s;
  return out;
}

Outcome refusal(const std::string& event, const std::string& job_ref, const policy::JobRequest& q, const std::string& why) {
  Outcome o;
  o.refuse = true;
  o.audit = true;
  o.event = event;
  o.job_ref = job_ref;
  o.request = q;
  o.decision_text = "deny";
  o.reasons = {why};
  o.user_message = why;
  o.log_message = event + (job_ref.empty() ? "" : " of job " + job_ref) + " refused for " +
                  (q.user.empty() ? "uid " + std::to_string(q.uid) : q.user) + ": " + why;
  return o;
}

bool same_datasets(std::vector<policy::DatasetRef> a, std::vector<policy::DatasetRef> b) {
  const auto by_text = [](const policy::DatasetRef& x, const policy::DatasetRef& y) { return x.str() < y.str(); };
  std::sort(a.begin(), a.end(), by_text);
  std::sort(b.begin(), b.end(), by_text);
  return a == b;
}

// Applies a policy decision to the outcome: refusal, or the fields to set.
void apply(Outcome& o, policy::Decision d, const std::string& features_before) {
  if (d.kind == policy::DecisionKind::deny) {
    o.refuse = true;
    o.user_message = d.message();
    o.log_message = o.event + (o.job_ref.empty() ? "" : " of job " + o.job_ref) + " denied for " + o.request.user +
                    ": " + d.message();
  } else {
    if (!d.partition.empty()) o.set_partition = d.partition;
    if (!d.added_features.empty()) o.set_features = d.features_after(features_before);
    std::vector<std::string> notes = d.reasons;
    notes.insert(notes.end(), d.would_deny.begin(), d.would_deny.end());
    o.user_message = joined(notes);
  }
  o.decision = std::move(d);
}

}  // namespace

policy::audit::Entry Outcome::audit_entry() const {
  policy::audit::Entry e;
  e.event = event;
  e.uid = request.uid;
  e.user = request.user;
  e.account = request.account;
  e.job_id = job_ref;  // as the update named it ("123", "123+1", "123_4"); "" at submission
  e.nodes = nodes;
  e.partition = request.partition;
  e.datasets = request.datasets;
  e.decision = decision ? &*decision : nullptr;
  e.decision_text = decision_text;
  e.reasons_extra = reasons;
  e.revision = revision;
  return e;
}

Outcome refuse_malformed(const std::string& event, const policy::JobRequest& partial, const std::string& why) {
  return refusal(event, "", partial, why);
}

std::optional<Outcome> check_het_component(std::uint32_t offset, const std::optional<std::vector<policy::DatasetRef>>& first,
                                           const policy::JobRequest& request) {
  if (offset == 0) return std::nullopt;
  if (!first)
    return refusal("submit", "", request,
                   "component " + std::to_string(offset) + " of a heterogeneous job arrived without component 0; "
                   "it cannot be judged, so it is refused");
  if (same_datasets(*first, request.datasets)) return std::nullopt;
  return refusal("submit", "", request,
                 "component " + std::to_string(offset) + " of this heterogeneous job declares datasets (" +
                     policy::format_dataset_list(request.datasets) + ") that differ from component 0's (" +
                     policy::format_dataset_list(*first) + "); the batch script and --het-group steps run on every "
                     "component's nodes, so give every component the same --dataset");
}

Outcome decide_submit(const PolicyView& view, const policy::JobRequest& q, const char* admin_comment) {
  Outcome o;
  o.event = "submit";
  o.request = q;
  o.audit = true;
  // Nobody but this plugin writes the marker: one the submitter put in admin_comment
  // (through the API) is dropped, whatever it says.
  const std::string given = admin_comment != nullptr ? admin_comment : "";
  const std::string cleaned = plugins::without_marker(given);
  if (!view.policy) {
    if (!q.datasets.empty()) {
      o = refusal("submit", "", q,
                  "no valid data policy is loaded (" + view.why_none +
                      "), so jobs that declare datasets cannot be placed; ask your site administrators");
      return o;
    }
    o.decision_text = "allow";
    o.reasons = {"no valid data policy is loaded: " + view.why_none};
  } else {
    o.revision = view.policy->revision();
    apply(o, view.policy->evaluate(q), q.features);
    if (o.refuse) return o;
  }
  if (!q.datasets.empty())
    o.set_admin_comment = plugins::with_marker(cleaned, q.datasets);
  else if (cleaned != given)
    o.set_admin_comment = cleaned;
  return o;
}

Outcome decide_modify(const PolicyView& view, const Update& u) {
  const bool placement = u.partition_given || u.features_given || u.account_given;
  const bool touches = placement || u.admin_comment.has_value();
  policy::JobRequest q = u.request;
  const auto ref = plugins::parse_job_ref(u.ref_text);
  if (!ref) {
    if (!touches) return {};
    return refusal("modify", u.ref_text, q,
                   "cannot tell which job '" + u.ref_text + "' is, so its datasets cannot be checked; "
                   "update one job at a time by its id (123, 123_4 or 123+1)");
  }
  const std::string id = ref->str();
  switch (u.facts.state) {
    case JobFacts::State::unknown:
      if (!touches) return {};
      return refusal("modify", id, q, u.facts.problem + "; its datasets cannot be checked yet, retry in a few seconds");
    case JobFacts::State::malformed:
      if (!touches) return {};
      return refusal("modify", id, q, u.facts.problem + "; ask your site administrators");
    case JobFacts::State::known:
      break;
  }
  if (u.facts.datasets.empty()) return {};
  Outcome o;
  o.event = "modify";
  o.job_ref = id;
  o.nodes = u.facts.nodes;
  q.datasets = u.facts.datasets;
  if (!u.account_given) q.account = u.facts.account;
  if (u.admin_comment) o.set_admin_comment = plugins::with_marker(*u.admin_comment, q.datasets);
  if (!placement) {
    o.request = q;
    return o;
  }
  // A field the update leaves alone keeps the job's current value: a features-only update
  // is judged in the job's current partition and may never move it.
  if (!u.partition_given) q.partition = u.facts.partition;
  if (!u.features_given) q.features = u.facts.features;
  // An account change is judged like a submission (grants); otherwise only where the job
  // may run: access was decided at submission.
  q.placement_only = !u.account_given;
  o.request = q;
  o.audit = true;
  if (!view.policy)
    return refusal("modify", id, q,
                   "no valid data policy is loaded (" + view.why_none + "), so job " + id +
                       " that declares datasets cannot be moved; ask your site administrators");
  o.revision = view.policy->revision();
  apply(o, view.policy->evaluate(q), q.features);
  if (!o.refuse && !u.partition_given && o.set_partition && *o.set_partition != u.facts.partition) {
    Outcome r = refusal("modify", id, q,
                        "this update does not name a partition, and the job's partition " + u.facts.partition +
                            " no longer fits its datasets (" + o.decision->message() +
                            "); name the partition to move to");
    r.revision = o.revision;
    return r;
  }
  if (!u.partition_given) o.set_partition.reset();
  if (!u.features_given && !o.set_features) o.set_features.reset();
  return o;
}

}  // namespace saker::job_submit
