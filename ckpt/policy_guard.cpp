#include "ckpt/policy_guard.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::ckpt {

std::vector<policy::DatasetRef> to_dataset_refs(const std::vector<DatasetVersion>& lineage) {
  std::vector<policy::DatasetRef> refs;
  refs.reserve(lineage.size());
  for (const DatasetVersion& d : lineage) refs.push_back({d.name, d.version});
  return refs;
}

PolicyGuard::PolicyGuard(policy::PolicyPtr policy) : policy_(std::move(policy)) {
  SAKER_ASSERT(policy_ != nullptr, "PolicyGuard needs a loaded policy");
}

std::shared_ptr<const PolicyGuard> PolicyGuard::from_file(const std::string& path) {
  return std::make_shared<const PolicyGuard>(policy::Policy::load_file(path));
}

void PolicyGuard::check(const std::filesystem::path& dir, const std::vector<DatasetVersion>& lineage) const {
  const policy::Verdict v = policy_->check_checkpoint_destination(dir.string(), to_dataset_refs(lineage));
  if (!v.allowed) throw Error(v.message + " (site policy " + policy_->source() + ")");
  // Allowed with a message: an audit-mode rule would have refused this destination.
  if (!v.message.empty()) log::warn("ckpt: checkpoint destination " + dir.string() + ": " + v.message);
}

bool PolicyGuard::require_encryption(const std::vector<DatasetVersion>& lineage) const {
  return policy_->encryption_required(to_dataset_refs(lineage));
}

bool PolicyGuard::restricted(const std::vector<DatasetVersion>& lineage) const {
  const auto refs = to_dataset_refs(lineage);
  return policy_->encryption_required(refs) || policy_->transit_encryption_required(refs);
}

}  // namespace saker::ckpt
