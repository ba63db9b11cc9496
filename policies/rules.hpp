// What the policy's decisions share (engine.cpp, evaluate.cpp): looking datasets up,
// grants, and the zone names their messages quote. Internal to libsaker_policy.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "policies/model.hpp"

namespace saker::policy::rules {

std::string join(const std::vector<std::string>& items, const char* sep = ", ");
std::vector<std::string> split_commas(const std::string& s);  // empty items dropped

std::string zone_label(const Policy::Impl& p, int z);  // "ae (AE)"
// "ae (AE), ae2 (AE)": the zones where a dataset may be processed ("any zone" if unrestricted).
std::string allowed_zones(const Policy::Impl& p, const Dataset& d);
// "AE" or "AE, EU": the codes, for the short form users read first.
std::string allowed_codes(const Policy::Impl& p, const Dataset& d);

// A declared dataset the policy knows.
struct Known {
  const Dataset* dataset;
  std::string label;  // as the user wrote it: name[@version]
};

// Called for each declared dataset the policy does not know (name or version), with
// the unknown-datasets rule and the sentence that explains it.
using UnknownSink = std::function<void(UnknownDatasets, const std::string&)>;

// Looks the declared datasets up; unknown names and versions go to `unknown`.
std::vector<Known> resolve(const Policy::Impl& p, const std::vector<DatasetRef>& refs, const UnknownSink& unknown);

// Whether a grant to the user, the account or one of the groups covers the dataset.
bool granted(const Policy::Impl& p, const Identity& who, const Dataset& d);
// The refusal when a dataset needs a grant that `who` lacks (the access rule).
std::string no_grant_text(const Policy::Impl& p, const Identity& who, const Known& k);

}  // namespace saker::policy::rules
