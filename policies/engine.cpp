// The compiled policy's decisions: submit-time (evaluate), launch-time (check_launch)
// and checkpoint-time (check_checkpoint_destination, encryption_required). All const,
// allocation-light and free of I/O except path resolution for checkpoints, so they
// are safe under slurmctld's locks.
#include <algorithm>
#include <filesystem>
#include <functional>

#include "policies/model.hpp"

namespace saker::policy {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string zone_label(const Policy::Impl& p, int z) { return p.zones[z].name + " (" + p.zones[z].code + ")"; }

// "ae (AE), ae2 (AE)": the zones where a dataset may be processed.
std::string allowed_zones(const Policy::Impl& p, const Dataset& d) {
  if (!d.restricted_zones) return "any zone";
  std::vector<std::string> out;
  for (std::size_t z = 0; z < p.zones.size(); ++z)
    if (d.zone_allowed[z]) out.push_back(zone_label(p, static_cast<int>(z)));
  return out.empty() ? "no zone" : join(out);
}

// "AE" or "AE, EU": the codes, for the short form users read first.
std::string allowed_codes(const Policy::Impl& p, const Dataset& d) {
  std::vector<std::string> out;
  for (std::size_t z = 0; z < p.zones.size(); ++z)
    if (d.zone_allowed[z] && std::find(out.begin(), out.end(), p.zones[z].code) == out.end())
      out.push_back(p.zones[z].code);
  return out.empty() ? "no zone" : join(out);
}

bool grant_covers(const Policy::Impl& p, const Grant& g, const Dataset& d) {
  const bool class_ok = g.classifications.empty() ||
                        std::find(g.classifications.begin(), g.classifications.end(), d.classification) !=
                            g.classifications.end();
  if (!class_ok) return false;
  if (g.dataset_globs.empty()) return true;
  (void)p;
  return std::any_of(g.dataset_globs.begin(), g.dataset_globs.end(),
                     [&](const std::string& glob) { return glob_match(glob, d.name); });
}

bool granted(const Policy::Impl& p, const JobRequest& q, const Dataset& d) {
  const auto via = [&](const std::unordered_map<std::string, std::vector<int>>& map, const std::string& who) {
    if (who.empty()) return false;
    const auto it = map.find(who);
    if (it == map.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](int g) { return grant_covers(p, p.grants[g], d); });
  };
  if (via(p.grants_by_user, q.user) || via(p.grants_by_account, q.account)) return true;
  return std::any_of(q.groups.begin(), q.groups.end(), [&](const std::string& g) { return via(p.grants_by_group, g); });
}

struct Known {
  const Dataset* dataset;
  std::string label;  // as the user wrote it: name[@version]
};

// Looks the job's datasets up; unknown names and versions go through the
// unknown-datasets rule. Returns the known ones.
std::vector<Known> resolve(const Policy::Impl& p, const std::vector<DatasetRef>& refs,
                           const std::function<void(UnknownDatasets, const std::string&)>& unknown) {
  std::vector<Known> out;
  for (const auto& ref : refs) {
    const int i = p.find_dataset(ref.name);
    if (i < 0) {
      unknown(p.unknown, "dataset " + ref.str() + " is not in the site policy " + p.source +
                             " (check the name, or ask the data steward to register it)");
      continue;
    }
    const Dataset& d = p.datasets[i];
    if (!ref.version.empty() && !d.versions.empty() &&
        std::find(d.versions.begin(), d.versions.end(), ref.version) == d.versions.end()) {
      unknown(p.unknown, "dataset " + d.name + " has no version " + ref.version + "; known versions: " + join(d.versions));
      continue;
    }
    out.push_back({&d, ref.str()});
  }
  return out;
}

}  // namespace

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

Decision Policy::evaluate(const JobRequest& q) const {
  const Impl& p = *impl_;
  Decision out;
  std::vector<std::string> denials;
  const auto violate = [&](Mode mode, const std::string& text) {
    if (mode == Mode::enforce) denials.push_back(text);
    else out.would_deny.push_back("would deny: " + text);
  };
  const auto ignore_unknown = [](UnknownDatasets, const std::string&) {};
  const auto unknown = [&](UnknownDatasets rule, const std::string& text) {
    if (rule == UnknownDatasets::deny) denials.push_back(text);
    else if (rule == UnknownDatasets::audit) out.would_deny.push_back("would deny: " + text);
    else out.reasons.push_back(text + "; allowed by unknown_datasets: allow");
  };
  const std::vector<Known> known = q.placement_only ? resolve(p, q.datasets, ignore_unknown) : resolve(p, q.datasets, unknown);

  // Access: restricted classifications need a grant to the user, the account or a group.
  for (const auto& k : known)
    if (!q.placement_only && p.classifications[k.dataset->classification].requires_grant && !granted(p, q, *k.dataset))
      violate(p.access, "user " + (q.user.empty() ? std::to_string(q.uid) : q.user) + " (account " +
                            (q.account.empty() ? "none" : q.account) + ") has no grant for " +
                            p.classifications[k.dataset->classification].name + " dataset " + k.label +
                            "; a grant in " + p.source + " must name the user, the account or one of the user's groups");

  // Residency: which partitions may run every declared dataset, and which fit the job.
  bool restricted = false;
  for (const auto& k : known) restricted = restricted || k.dataset->restricted_zones;
  const auto zone_ok = [&](int part) {
    for (const auto& k : known)
      if (k.dataset->restricted_zones && !k.dataset->zone_allowed[p.partitions[part].zone]) return false;
    return true;
  };
  const auto fits = [&](int part) {
    const Partition& x = p.partitions[part];
    if (q.gpus > 0 && x.cpu_only) return false;
    if (q.gpus_per_task > 0 && x.gpus_per_node > 0 && p.gpus_per_task_divide_node && x.gpus_per_node % q.gpus_per_task != 0)
      return false;
    return true;
  };
  std::vector<std::string> allowed_parts;
  for (std::size_t i = 0; i < p.partitions.size(); ++i)
    if (zone_ok(static_cast<int>(i))) allowed_parts.push_back(p.partitions[i].name);
  const auto pick = [&](bool need_zone) {  // the default partition when it will do, else the first that does
    const auto good = [&](int i) { return (!need_zone || zone_ok(i)) && fits(i); };
    if (p.default_partition >= 0 && good(p.default_partition)) return p.default_partition;
    for (std::size_t i = 0; i < p.partitions.size(); ++i)
      if (good(static_cast<int>(i))) return static_cast<int>(i);
    return -1;
  };
  const auto residency_text = [&](const std::string& part) {
    const int i = p.find_partition(part);
    for (const auto& k : known) {
      if (!k.dataset->restricted_zones) continue;
      const std::string where = i < 0 ? "partition " + part + " is in no zone of the site policy"
                                      : "partition " + part + " is in " + p.zones[p.partitions[i].zone].code;
      if (i < 0 || !k.dataset->zone_allowed[p.partitions[i].zone])
        return "dataset " + k.label + " is resident in " + allowed_codes(p, *k.dataset) + "; " + where +
               "; allowed: " + (allowed_parts.empty() ? std::string("no partition") : join(allowed_parts));
    }
    return std::string();
  };

  const std::vector<std::string> requested = split_commas(q.partition);
  std::vector<std::string> effective = requested;  // where the job will be able to run
  if (requested.empty()) {
    const int def = p.default_partition;
    if (restricted && p.residency == Mode::enforce) {
      const int chosen = pick(true);
      if (chosen < 0) {
        denials.push_back(residency_text(def >= 0 ? p.partitions[def].name : std::string("(default)")) +
                          " (none of them fits this job's GPU request)");
      } else {
        out.partition = p.partitions[chosen].name;
        out.reasons.push_back("partition set to " + out.partition + ": " + known.front().label +
                              (known.size() > 1 ? " and the other datasets" : std::string()) +
                              " may only be processed in " + allowed_codes(p, *std::find_if(known.begin(), known.end(), [](const Known& k) { return k.dataset->restricted_zones; })->dataset));
      }
    } else if (restricted) {
      if (def < 0) out.would_deny.push_back("would deny: the job names no partition and the policy declares no default partition to check residency against");
      else if (!zone_ok(def)) out.would_deny.push_back("would deny: " + residency_text(p.partitions[def].name));
    } else if (q.gpus > 0 && def >= 0 && p.partitions[def].cpu_only && p.gpu == Mode::enforce) {
      const int chosen = pick(false);
      if (chosen >= 0) {
        out.partition = p.partitions[chosen].name;
        out.reasons.push_back("partition set to " + out.partition + ": the default partition " + p.partitions[def].name +
                              " is CPU-only and the job asks for " + std::to_string(q.gpus) + " GPUs");
      }
    }
    if (!out.partition.empty()) effective = {out.partition};
    else if (def >= 0) effective = {p.partitions[def].name};
  } else if (restricted) {
    std::vector<std::string> good, bad;
    for (const auto& name : requested) {
      const int i = p.find_partition(name);
      (i >= 0 && zone_ok(i) ? good : bad).push_back(name);
    }
    if (!bad.empty()) {
      if (p.residency == Mode::enforce && !good.empty()) {
        out.partition = join(good, ",");
        effective = good;
        out.reasons.push_back("partition list reduced to " + out.partition + ": " + residency_text(bad.front()));
      } else {
        violate(p.residency, residency_text(bad.front()));
      }
    }
  }

  // GPU rules.
  if (q.gpus > 0) {
    const auto it = p.max_gpus_by_account.find(q.account);
    const std::uint32_t limit = it != p.max_gpus_by_account.end() ? it->second : p.default_max_gpus;
    if (limit > 0 && q.gpus > limit)
      violate(p.gpu, "the job asks for " + std::to_string(q.gpus) + " GPUs; account " +
                         (q.account.empty() ? "(none)" : q.account) + " may use at most " + std::to_string(limit) +
                         " per job");
  }
  for (const auto& name : effective) {
    const int i = p.find_partition(name);
    if (i < 0) continue;
    const Partition& x = p.partitions[i];
    if (q.gpus > 0 && x.cpu_only) {
      std::vector<std::string> gpu_parts;
      for (const auto& y : p.partitions)
        if (!y.cpu_only) gpu_parts.push_back(y.name);
      violate(p.gpu, "partition " + x.name + " is CPU-only and the job asks for " + std::to_string(q.gpus) +
                         " GPUs; GPU partitions: " + (gpu_parts.empty() ? std::string("none") : join(gpu_parts)));
    }
    if (q.gpus_per_task > 0 && x.gpus_per_node > 0 && p.gpus_per_task_divide_node &&
        x.gpus_per_node % q.gpus_per_task != 0) {
      std::vector<std::string> divisors;
      for (std::uint32_t g = 1; g <= x.gpus_per_node; ++g)
        if (x.gpus_per_node % g == 0) divisors.push_back(std::to_string(g));
      violate(p.gpu, "--gpus-per-task=" + std::to_string(q.gpus_per_task) + " does not divide the " +
                         std::to_string(x.gpus_per_node) + " GPUs of a node in partition " + x.name + "; use " +
                         join(divisors));
    }
  }

  // Locality: send the job to nodes that mount a replica in its zone (by feature).
  if (p.locality != LocalityMode::off && denials.empty()) {
    int zone = -1;
    for (const auto& name : effective) {
      const int i = p.find_partition(name);
      const int z = i < 0 ? -2 : p.partitions[i].zone;
      zone = (zone == -1 || zone == z) ? z : -2;
    }
    if (zone >= 0) {
      for (const auto& k : known)
        for (int s : k.dataset->replicas) {
          const Storage& st = p.storage[s];
          if (st.zone != zone || st.features.empty()) continue;
          const std::string& f = st.features.front();
          if (!requires_feature(q.features, f) &&
              std::find(out.added_features.begin(), out.added_features.end(), f) == out.added_features.end()) {
            if (p.locality == LocalityMode::enforce) {
              out.added_features.push_back(f);
              out.reasons.push_back("feature " + f + " added: dataset " + k.label + " has a replica on " + st.name);
            } else {
              out.reasons.push_back("locality (audit): would add feature " + f + " for dataset " + k.label);
            }
          }
          break;  // one replica per dataset is enough
        }
    }
  }

  if (!denials.empty()) {
    out.kind = DecisionKind::deny;
    out.reasons = std::move(denials);
    out.partition.clear();
    out.added_features.clear();
  } else if (!out.partition.empty() || !out.added_features.empty()) {
    out.kind = DecisionKind::modify;
  }
  return out;
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

Verdict Policy::check_launch(std::string_view node_name, const std::vector<DatasetRef>& datasets) const {
  const Impl& p = *impl_;
  VerdictBuilder v;
  const auto refuse = [&](bool enforce, const std::string& text) { v.refuse(enforce, text); };
  const std::vector<Known> known = resolve(p, datasets, v.unknown());
  const auto it = p.node_zone.find(std::string(node_name));
  for (const auto& k : known) {
    if (!k.dataset->restricted_zones) continue;
    const bool enforce = p.residency == Mode::enforce;
    if (it == p.node_zone.end())
      refuse(enforce, "node " + std::string(node_name) + " is in no zone of the site policy " + p.source +
                          "; dataset " + k.label + " may only be processed in " + allowed_zones(p, *k.dataset));
    else if (!k.dataset->zone_allowed[it->second])
      refuse(enforce, "node " + std::string(node_name) + " is in zone " + zone_label(p, it->second) + "; dataset " +
                          k.label + " may only be processed in " + allowed_zones(p, *k.dataset));
  }
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

bool Policy::encryption_required(const std::vector<DatasetRef>& lineage) const {
  const Impl& p = *impl_;
  for (const auto& ref : lineage) {
    const int i = p.find_dataset(ref.name);
    // An unknown dataset could be anything: encrypt unless the site allows unknown data.
    if (i < 0) {
      if (p.unknown != UnknownDatasets::allow) return true;
      continue;
    }
    if (p.classifications[p.datasets[i].classification].encrypt_checkpoints) return true;
  }
  return false;
}

}  // namespace saker::policy
