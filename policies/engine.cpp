// The compiled policy's decisions: launch-time (check_launch, check_launch_access) and
// checkpoint-time (check_checkpoint_destination, encryption_required); the submit-time
// decision, Policy::evaluate, is in evaluate.cpp. All const, allocation-light and free of
// I/O except path resolution for checkpoints, so they are safe under slurmctld's locks.
#include <algorithm>
#include <filesystem>
#include <functional>

#include "policies/model.hpp"
#include "policies/rules.hpp"

namespace saker::policy {

using rules::allowed_zones;
using rules::join;
using rules::Known;
using rules::resolve;
using rules::zone_label;

int Policy::Impl::find_dataset(std::string_view name) const {
  const auto it = dataset_index.find(std::string(name));
  return it == dataset_index.end() ? -1 : it->second;
}

int Policy::Impl::find_partition(std::string_view name) const {
  const auto it = partition_index.find(std::string(name));
  return it == partition_index.end() ? -1 : it->second;
}

const char* to_string(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::allow: return "allow";
    case DecisionKind::modify: return "modify";
    case DecisionKind::deny: return "deny";
  }
  return "?";
}

// Whether a constraint expression already requires feature f on every node: f is one of
// its AND-ed names, exactly (a substring test took "lustre-ae2" for "lustre-ae", and the
// replica feature was never added). Any OR, matching-OR bracket or count makes the answer
// "no": adding f once more is harmless, leaving it out is not.
bool requires_feature(std::string_view expression, std::string_view f) {
  if (expression.find_first_of("|[]*") != std::string_view::npos) return false;
  std::size_t start = 0;
  while (start <= expression.size()) {
    const std::size_t end = std::min(expression.find_first_of("&,", start), expression.size());
    std::string_view name = expression.substr(start, end - start);
    while (!name.empty() && (name.front() == '(' || name.front() == ' ')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ')' || name.back() == ' ')) name.remove_suffix(1);
    if (name == f) return true;
    start = end + 1;
  }
  return false;
}

std::string Decision::features_after(const std::string& requested) const {
  if (added_features.empty()) return requested;
  const std::string added = join(added_features, "&");
  if (requested.empty()) return added;
  // AND binds tighter than OR in Slurm's constraint syntax: keep the user's expression whole.
  if (requested.find('|') != std::string::npos) return "(" + requested + ")&" + added;
  return requested + "&" + added;
}

std::string Decision::message() const { return join(reasons, "; "); }

Policy::Policy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Policy::~Policy() = default;
const std::string& Policy::revision() const { return impl_->revision; }
const std::string& Policy::source() const { return impl_->source; }

Summary Policy::summary() const {
  const Impl& p = *impl_;
  return {p.schema_version, p.zones.size(),   p.partitions.size(), p.node_sets,
          p.storage.size(), p.datasets.size(), p.grants.size(),    p.max_gpus_by_account.size()};
}

std::optional<std::string> Policy::zone_of_node(std::string_view node_name) const {
  const auto it = impl_->node_zone.find(std::string(node_name));
  if (it == impl_->node_zone.end()) return std::nullopt;
  return impl_->zones[it->second].name;
}

namespace {

// Builds a Verdict: the first enforced refusal decides and is the message; audit-mode
// refusals become "would deny" notes in the message of an allowed verdict.
class VerdictBuilder {
 public:
  void refuse(bool enforce, const std::string& text) {
    if (!enforce) {
      audit_.push_back("would deny: " + text);
      return;
    }
    if (verdict_.allowed) {
      verdict_.allowed = false;
      verdict_.message = text;
    }
  }
  // The unknown-datasets rule, as resolve() reports it.
  std::function<void(UnknownDatasets, const std::string&)> unknown() {
    return [this](UnknownDatasets rule, const std::string& text) {
      if (rule != UnknownDatasets::allow) refuse(rule == UnknownDatasets::deny, text);
    };
  }
  Verdict finish() {
    if (verdict_.allowed && !audit_.empty()) verdict_.message = join(audit_, "; ");
    return verdict_;
  }

 private:
  Verdict verdict_;
  std::vector<std::string> audit_;
};

}  // namespace

namespace {

// Residency at launch: each restricted dataset against the node's zone.
void check_node_zone(const Policy::Impl& p, std::string_view node_name, const std::vector<Known>& known,
                     VerdictBuilder& v) {
  const auto it = p.node_zone.find(std::string(node_name));
  const bool enforce = p.residency == Mode::enforce;
  for (const auto& k : known) {
    if (!k.dataset->restricted_zones) continue;
    if (it == p.node_zone.end())
      v.refuse(enforce, "node " + std::string(node_name) + " is in no zone of the site policy " + p.source +
                            "; dataset " + k.label + " may only be processed in " + allowed_zones(p, *k.dataset));
    else if (!k.dataset->zone_allowed[it->second])
      v.refuse(enforce, "node " + std::string(node_name) + " is in zone " + zone_label(p, it->second) + "; dataset " +
                            k.label + " may only be processed in " + allowed_zones(p, *k.dataset));
  }
}

}  // namespace

Verdict Policy::check_launch(std::string_view node_name, const std::vector<DatasetRef>& datasets) const {
  const Impl& p = *impl_;
  VerdictBuilder v;
  const std::vector<Known> known = resolve(p, datasets, v.unknown());
  check_node_zone(p, node_name, known, v);
  return v.finish();
}

Verdict Policy::check_launch_access(std::string_view node_name, const std::vector<DatasetRef>& datasets,
                                    const Identity& who) const {
  const Impl& p = *impl_;
  VerdictBuilder v;
  const std::vector<Known> known = resolve(p, datasets, v.unknown());
  check_node_zone(p, node_name, known, v);
  for (const auto& k : known)
    if (p.classifications[k.dataset->classification].requires_grant && !rules::granted(p, who, *k.dataset))
      v.refuse(p.access == Mode::enforce, rules::no_grant_text(p, who, k));
  return v.finish();
}

namespace {

// The storage system whose mount holds `path` (longest mount prefix, whole components).
int storage_of(const Policy::Impl& p, const std::string& path) {
  int best = -1;
  std::size_t best_len = 0;
  for (std::size_t s = 0; s < p.storage.size(); ++s)
    for (const auto& m : p.storage[s].mounts)
      if ((path == m || (path.size() > m.size() && path.compare(0, m.size(), m) == 0 && path[m.size()] == '/')) &&
          m.size() > best_len) {
        best = static_cast<int>(s);
        best_len = m.size();
      }
  return best;
}

std::string resolve_path(const std::string& path) {
  std::error_code ec;
  // Symlinks are followed where they exist, so /lustre/ae/link -> /scratch/eu is judged as /scratch/eu.
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) abs = path;
  std::filesystem::path real = std::filesystem::weakly_canonical(abs, ec);
  std::string out = (ec ? abs.lexically_normal() : real).string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace

Verdict Policy::check_checkpoint_destination(const std::string& path, const std::vector<DatasetRef>& lineage) const {
  const Impl& p = *impl_;
  VerdictBuilder v;
  const auto refuse = [&](bool enforce, const std::string& text) { v.refuse(enforce, text); };
  const std::vector<Known> known = resolve(p, lineage, v.unknown());
  const std::string real = resolve_path(path);
  const int s = storage_of(p, real);
  const bool enforce = p.residency == Mode::enforce;
  for (const auto& k : known) {
    const Dataset& d = *k.dataset;
    std::vector<std::string> ok_mounts;
    for (const auto& st : p.storage)
      if (!d.restricted_zones || d.zone_allowed[st.zone])
        for (const auto& m : st.mounts) ok_mounts.push_back(m);
    const std::string fix = "; write it under " + (ok_mounts.empty() ? std::string("(no storage in an allowed zone)") : join(ok_mounts));
    if (s >= 0) {
      if (d.restricted_zones && !d.zone_allowed[p.storage[s].zone])
        refuse(enforce, "checkpoint path " + real + " is on storage " + p.storage[s].name + " in zone " +
                            zone_label(p, p.storage[s].zone) + "; the model was trained on dataset " + k.label +
                            ", which may only be kept in " + allowed_zones(p, d) + fix);
    } else if (d.restricted_zones || p.classifications[d.classification].requires_grant) {
      refuse(enforce, "checkpoint path " + real + " is on no storage system of the site policy " + p.source +
                          "; the model was trained on " + p.classifications[d.classification].name + " dataset " +
                          k.label + (d.restricted_zones ? ", which may only be kept in " + allowed_zones(p, d) : std::string()) + fix);
    }
  }
  return v.finish();
}

namespace {

// Whether any dataset of `datasets` has a classification for which `demands` holds. An
// unknown dataset could be anything: it demands it unless the site allows unknown data.
template <class Demands>
bool any_classification(const Policy::Impl& p, const std::vector<DatasetRef>& datasets, Demands demands) {
  for (const auto& ref : datasets) {
    const int i = p.find_dataset(ref.name);
    if (i < 0) {
      if (p.unknown != UnknownDatasets::allow) return true;
      continue;
    }
    if (demands(p.classifications[p.datasets[i].classification])) return true;
  }
  return false;
}

}  // namespace

bool Policy::encryption_required(const std::vector<DatasetRef>& lineage) const {
  return any_classification(*impl_, lineage, [](const Classification& c) { return c.encrypt_checkpoints; });
}

bool Policy::transit_encryption_required(const std::vector<DatasetRef>& datasets) const {
  return any_classification(*impl_, datasets, [](const Classification& c) { return c.encrypt_transit; });
}

}  // namespace saker::policy
