// The residency rule for checkpoints: a ckpt::DestinationGuard over the site policy
// (saker-policy.yaml(5)). A model trained on a resident dataset may only be written to
// storage in the dataset's allowed zones (the storage system is found by the longest
// mount prefix of the directory, symlinks resolved), and classifications marked
// encrypt_checkpoints require a key.
//
// Kept out of libsaker_ckpt (in libsaker_ckpt_policy) so the checkpoint library does
// not depend on the policy engine: programs that want the rule link both.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "saker/ckpt.hpp"
#include "saker/policy.hpp"

namespace saker::ckpt {

class PolicyGuard final : public DestinationGuard {
 public:
  explicit PolicyGuard(policy::PolicyPtr policy);
  // Loads the policy file; throws policy::LoadError (file:line:column) when it does not load.
  static std::shared_ptr<const PolicyGuard> from_file(const std::string& path);

  // Throws saker::Error with the policy engine's explanation (the directory, its storage
  // system and zone, the dataset and its allowed zones, where to write instead) and the
  // policy file. Audit-mode refusals are logged as warnings and allowed.
  void check(const std::filesystem::path& dir, const std::vector<DatasetVersion>& lineage) const override;
  bool require_encryption(const std::vector<DatasetVersion>& lineage) const override;
  // A classification that demands encrypted checkpoints or encrypted transit, or a dataset
  // the policy does not know (fail closed, as for encryption).
  bool restricted(const std::vector<DatasetVersion>& lineage) const override;

  const policy::Policy& policy() const { return *policy_; }

 private:
  policy::PolicyPtr policy_;
};

// Lineage entries as the policy engine names datasets.
std::vector<policy::DatasetRef> to_dataset_refs(const std::vector<DatasetVersion>& lineage);

}  // namespace saker::ckpt
