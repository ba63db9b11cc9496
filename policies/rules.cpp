#include "policies/rules.hpp"

#include <algorithm>

namespace saker::policy::rules {
namespace {

bool grant_covers(const Grant& g, const Dataset& d) {
  const bool class_ok = g.classifications.empty() ||
                        std::find(g.classifications.begin(), g.classifications.end(), d.classification) !=
                            g.classifications.end();
  if (!class_ok) return false;
  if (g.dataset_globs.empty()) return true;
  return std::any_of(g.dataset_globs.begin(), g.dataset_globs.end(),
                     [&](const std::string& glob) { return glob_match(glob, d.name); });
}

}  // namespace

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

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

std::string zone_label(const Policy::Impl& p, int z) { return p.zones[z].name + " (" + p.zones[z].code + ")"; }

std::string allowed_zones(const Policy::Impl& p, const Dataset& d) {
  if (!d.restricted_zones) return "any zone";
  std::vector<std::string> out;
  for (std::size_t z = 0; z < p.zones.size(); ++z)
    if (d.zone_allowed[z]) out.push_back(zone_label(p, static_cast<int>(z)));
  return out.empty() ? "no zone" : join(out);
}

std::string allowed_codes(const Policy::Impl& p, const Dataset& d) {
  std::vector<std::string> out;
  for (std::size_t z = 0; z < p.zones.size(); ++z)
    if (d.zone_allowed[z] && std::find(out.begin(), out.end(), p.zones[z].code) == out.end())
      out.push_back(p.zones[z].code);
  return out.empty() ? "no zone" : join(out);
}

std::vector<Known> resolve(const Policy::Impl& p, const std::vector<DatasetRef>& refs, const UnknownSink& unknown) {
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

bool granted(const Policy::Impl& p, const Identity& who, const Dataset& d) {
  const auto via = [&](const std::unordered_map<std::string, std::vector<int>>& map, const std::string& name) {
    if (name.empty()) return false;
    const auto it = map.find(name);
    if (it == map.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](int g) { return grant_covers(p.grants[g], d); });
  };
  if (via(p.grants_by_user, who.user) || via(p.grants_by_account, who.account)) return true;
  return std::any_of(who.groups.begin(), who.groups.end(),
                     [&](const std::string& g) { return via(p.grants_by_group, g); });
}

std::string no_grant_text(const Policy::Impl& p, const Identity& who, const Known& k) {
  return "user " + (who.user.empty() ? std::to_string(who.uid) : who.user) + " (account " +
         (who.account.empty() ? "none" : who.account) + ") has no grant for " +
         p.classifications[k.dataset->classification].name + " dataset " + k.label + "; a grant in " + p.source +
         " must name the user, the account or one of the user's groups";
}

}  // namespace saker::policy::rules
