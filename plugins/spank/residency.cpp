#include "plugins/spank/residency.hpp"

#include <algorithm>

namespace saker::spank {

ResidencyVerdict check_residency(const policy::Policy& p, const std::string& node_name,
                                 const std::vector<policy::DatasetRef>& datasets, const LaunchIdentity& who) {
  if (datasets.empty()) return {};
  const policy::Verdict v = p.check_launch_access(node_name, datasets, who);
  return {!v.allowed, v.message, p.transit_encryption_required(datasets)};
}

ResidencyVerdict check_residency(const std::string& policy_path, const std::string& node_name,
                                 const std::vector<policy::DatasetRef>& datasets, const LaunchIdentity& who) {
  ResidencyVerdict v;
  if (datasets.empty()) return v;
  const std::string list = policy::format_dataset_list(datasets);
  if (policy_path.empty()) {
    v.refuse = true;
    v.message = "this job declares datasets (" + list + ") but spank_saker.so has no policy=FILE in plugstack.conf, "
                "so residency cannot be checked on node " + node_name + "; ask your site administrators";
    return v;
  }
  if (node_name.empty()) {
    v.refuse = true;
    v.message = "cannot tell which node this is, so the residency of " + list + " cannot be checked";
    return v;
  }
  policy::PolicyPtr p;
  try {
    p = policy::Policy::load_file(policy_path);
  } catch (const std::exception& e) {
    v.refuse = true;
    v.message = "the data policy does not load on node " + node_name + " (" + e.what() +
                "), so the residency of " + list + " cannot be checked";
    return v;
  }
  return check_residency(*p, node_name, datasets, who);
}

void merge_datasets(std::vector<policy::DatasetRef>& into, const std::vector<policy::DatasetRef>& more) {
  for (const auto& d : more)
    if (std::find(into.begin(), into.end(), d) == into.end()) into.push_back(d);
}

}  // namespace saker::spank
