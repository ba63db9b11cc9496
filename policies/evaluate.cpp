// Policy::evaluate, the decision job_submit applies, as the steps a newcomer can follow:
//
//   1. resolve_datasets  look the declared datasets up (unknown ones: the unknown-datasets rule)
//   2. check_access      restricted classifications need a grant to the user, account or a group
//   3. place             residency: pick, keep, reduce or refuse the partition(s)
//   4. check_gpus        per-account GPU limits, CPU-only partitions, --gpus-per-task fit
//   5. add_locality      AND in the feature of a replica in the job's zone
//   6. finish            deny if any enforced rule refused, else modify or allow
//
// Each rule runs in its mode: enforce refuses, audit only notes "would deny: ...".
// All const and free of I/O: safe under slurmctld's locks.
#include <algorithm>

#include "policies/model.hpp"
#include "policies/rules.hpp"

namespace saker::policy {
namespace {

using rules::join;
using rules::Known;

class Evaluation {
 public:
  Evaluation(const Policy::Impl& p, const JobRequest& q) : p_(p), q_(q), who_{q.uid, q.user, q.groups, q.account} {}

  void resolve_datasets() {
    // job_modify re-checks placement only: unknown datasets were judged at submission.
    const auto unknown = [this](UnknownDatasets rule, const std::string& text) {
      if (q_.placement_only) return;
      if (rule == UnknownDatasets::deny) denials_.push_back(text);
      else if (rule == UnknownDatasets::audit) out_.would_deny.push_back("would deny: " + text);
      else out_.reasons.push_back(text + "; allowed by unknown_datasets: allow");
    };
    known_ = rules::resolve(p_, q_.datasets, unknown);
    for (const auto& k : known_) restricted_ = restricted_ || k.dataset->restricted_zones;
    for (std::size_t i = 0; i < p_.partitions.size(); ++i)
      if (zone_ok(static_cast<int>(i))) allowed_parts_.push_back(p_.partitions[i].name);
  }

  void check_access() {
    if (q_.placement_only) return;  // grants were decided at submission; an update names no user
    for (const auto& k : known_)
      if (p_.classifications[k.dataset->classification].requires_grant && !rules::granted(p_, who_, *k.dataset))
        violate(p_.access, rules::no_grant_text(p_, who_, k));
  }

  // Residency: where the job may run. `effective_` ends as the partitions it will be
  // able to run in, which the GPU and locality steps judge.
  void place() {
    const std::vector<std::string> requested = rules::split_commas(q_.partition);
    effective_ = requested;
    if (requested.empty()) place_unnamed();
    else if (restricted_) reduce_named(requested);
  }

  void check_gpus() {
    if (q_.gpus > 0) {
      const auto it = p_.max_gpus_by_account.find(q_.account);
      const std::uint32_t limit = it != p_.max_gpus_by_account.end() ? it->second : p_.default_max_gpus;
      if (limit > 0 && q_.gpus > limit)
        violate(p_.gpu, "the job asks for " + std::to_string(q_.gpus) + " GPUs; account " +
                            (q_.account.empty() ? "(none)" : q_.account) + " may use at most " + std::to_string(limit) +
                            " per job");
    }
    for (const auto& name : effective_) {
      const int i = p_.find_partition(name);
      if (i < 0) continue;
      const Partition& x = p_.partitions[i];
      if (q_.gpus > 0 && x.cpu_only) {
        std::vector<std::string> gpu_parts;
        for (const auto& y : p_.partitions)
          if (!y.cpu_only) gpu_parts.push_back(y.name);
        violate(p_.gpu, "partition " + x.name + " is CPU-only and the job asks for " + std::to_string(q_.gpus) +
                            " GPUs; GPU partitions: " + (gpu_parts.empty() ? std::string("none") : join(gpu_parts)));
      }
      if (!gpus_per_task_fit(x)) {
        std::vector<std::string> divisors;
        for (std::uint32_t g = 1; g <= x.gpus_per_node; ++g)
          if (x.gpus_per_node % g == 0) divisors.push_back(std::to_string(g));
        violate(p_.gpu, "--gpus-per-task=" + std::to_string(q_.gpus_per_task) + " does not divide the " +
                            std::to_string(x.gpus_per_node) + " GPUs of a node in partition " + x.name + "; use " +
                            join(divisors));
      }
    }
  }

  // Locality: send the job to nodes that mount a replica in its zone (by feature), when
  // every partition it may run in is in that one zone.
  void add_locality() {
    if (p_.locality == LocalityMode::off || !denials_.empty()) return;
    const int zone = single_zone();
    if (zone < 0) return;
    for (const auto& k : known_)
      for (int s : k.dataset->replicas) {
        const Storage& st = p_.storage[s];
        if (st.zone != zone || st.features.empty()) continue;
        const std::string& f = st.features.front();
        if (!requires_feature(q_.features, f) &&
            std::find(out_.added_features.begin(), out_.added_features.end(), f) == out_.added_features.end()) {
          if (p_.locality == LocalityMode::enforce) {
            out_.added_features.push_back(f);
            out_.reasons.push_back("feature " + f + " added: dataset " + k.label + " has a replica on " + st.name);
          } else {
            out_.reasons.push_back("locality (audit): would add feature " + f + " for dataset " + k.label);
          }
        }
        break;  // one replica per dataset is enough
      }
  }

  Decision finish() {
    if (!denials_.empty()) {
      out_.kind = DecisionKind::deny;
      out_.reasons = std::move(denials_);
      out_.partition.clear();
      out_.added_features.clear();
    } else if (!out_.partition.empty() || !out_.added_features.empty()) {
      out_.kind = DecisionKind::modify;
    }
    return std::move(out_);
  }

 private:
  void violate(Mode mode, const std::string& text) {
    if (mode == Mode::enforce) denials_.push_back(text);
    else out_.would_deny.push_back("would deny: " + text);
  }

  // Whether every restricted dataset may be processed in the partition's zone.
  bool zone_ok(int part) const {
    for (const auto& k : known_)
      if (k.dataset->restricted_zones && !k.dataset->zone_allowed[p_.partitions[part].zone]) return false;
    return true;
  }

  bool gpus_per_task_fit(const Partition& x) const {
    return !(q_.gpus_per_task > 0 && x.gpus_per_node > 0 && p_.gpus_per_task_divide_node &&
             x.gpus_per_node % q_.gpus_per_task != 0);
  }

  // Whether the partition can hold the job's GPU request at all.
  bool fits(int part) const {
    const Partition& x = p_.partitions[part];
    return !(q_.gpus > 0 && x.cpu_only) && gpus_per_task_fit(x);
  }

  // The default partition when it will do, else the first that does; -1 when none does.
  int pick(bool need_zone) const {
    const auto good = [&](int i) { return (!need_zone || zone_ok(i)) && fits(i); };
    if (p_.default_partition >= 0 && good(p_.default_partition)) return p_.default_partition;
    for (std::size_t i = 0; i < p_.partitions.size(); ++i)
      if (good(static_cast<int>(i))) return static_cast<int>(i);
    return -1;
  }

  // Why `part` breaks residency, with where the job would be allowed; "" when it does not.
  std::string residency_text(const std::string& part) const {
    const int i = p_.find_partition(part);
    for (const auto& k : known_) {
      if (!k.dataset->restricted_zones) continue;
      const std::string where = i < 0 ? "partition " + part + " is in no zone of the site policy"
                                      : "partition " + part + " is in " + p_.zones[p_.partitions[i].zone].code;
      if (i < 0 || !k.dataset->zone_allowed[p_.partitions[i].zone])
        return "dataset " + k.label + " is resident in " + rules::allowed_codes(p_, *k.dataset) + "; " + where +
               "; allowed: " + (allowed_parts_.empty() ? std::string("no partition") : join(allowed_parts_));
    }
    return std::string();
  }

  // The job names no partition: Slurm would use the default one. Route restricted data
  // into its zone (or refuse), and GPU jobs off a CPU-only default.
  void place_unnamed() {
    const int def = p_.default_partition;
    if (restricted_ && p_.residency == Mode::enforce) {
      const int chosen = pick(true);
      if (chosen < 0) {
        denials_.push_back(residency_text(def >= 0 ? p_.partitions[def].name : std::string("(default)")) +
                           " (none of them fits this job's GPU request)");
      } else {
        const Known& first_restricted =
            *std::find_if(known_.begin(), known_.end(), [](const Known& k) { return k.dataset->restricted_zones; });
        out_.partition = p_.partitions[chosen].name;
        out_.reasons.push_back("partition set to " + out_.partition + ": " + known_.front().label +
                               (known_.size() > 1 ? " and the other datasets" : std::string()) +
                               " may only be processed in " + rules::allowed_codes(p_, *first_restricted.dataset));
      }
    } else if (restricted_) {
      if (def < 0)
        out_.would_deny.push_back(
            "would deny: the job names no partition and the policy declares no default partition to check residency against");
      else if (!zone_ok(def))
        out_.would_deny.push_back("would deny: " + residency_text(p_.partitions[def].name));
    } else if (q_.gpus > 0 && def >= 0 && p_.partitions[def].cpu_only && p_.gpu == Mode::enforce) {
      const int chosen = pick(false);
      if (chosen >= 0) {
        out_.partition = p_.partitions[chosen].name;
        out_.reasons.push_back("partition set to " + out_.partition + ": the default partition " +
                               p_.partitions[def].name + " is CPU-only and the job asks for " + std::to_string(q_.gpus) +
                               " GPUs");
      }
    }
    if (!out_.partition.empty()) effective_ = {out_.partition};
    else if (def >= 0) effective_ = {p_.partitions[def].name};
  }

  // The job names partitions and declares restricted data: keep those in an allowed
  // zone, or refuse when none is (or when residency is only audited).
  void reduce_named(const std::vector<std::string>& requested) {
    std::vector<std::string> good, bad;
    for (const auto& name : requested) {
      const int i = p_.find_partition(name);
      (i >= 0 && zone_ok(i) ? good : bad).push_back(name);
    }
    if (bad.empty()) return;
    if (p_.residency == Mode::enforce && !good.empty()) {
      out_.partition = join(good, ",");
      effective_ = good;
      out_.reasons.push_back("partition list reduced to " + out_.partition + ": " + residency_text(bad.front()));
    } else {
      violate(p_.residency, residency_text(bad.front()));
    }
  }

  // The zone every effective partition is in; -1 when there is none, -2 when they differ
  // or one is unknown.
  int single_zone() const {
    int zone = -1;
    for (const auto& name : effective_) {
      const int i = p_.find_partition(name);
      const int z = i < 0 ? -2 : p_.partitions[i].zone;
      zone = (zone == -1 || zone == z) ? z : -2;
    }
    return zone;
  }

  const Policy::Impl& p_;
  const JobRequest& q_;
  const Identity who_;
  Decision out_;
  std::vector<std::string> denials_;       // enforced refusals; any one denies the job
  std::vector<Known> known_;               // the declared datasets the policy knows
  bool restricted_ = false;                // some known dataset is confined to zones
  std::vector<std::string> allowed_parts_;  // partitions in a zone every dataset allows
  std::vector<std::string> effective_;     // where the job will be able to run
};

}  // namespace

Decision Policy::evaluate(const JobRequest& q) const {
  Evaluation e(*impl_, q);
  e.resolve_datasets();
  e.check_access();
  e.place();
  e.check_gpus();
  e.add_locality();
  return e.finish();
}

}  // namespace saker::policy
