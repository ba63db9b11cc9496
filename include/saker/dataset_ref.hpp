// A dataset reference as users write it: NAME[@VERSION], in comma-separated lists
// (`sbatch --dataset=imagenet@2012,patients@v3`). Shared by the SPANK option, the
// job_submit plugin and the CLIs so every part parses the same way.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace saker::policy {

struct DatasetRef {
  std::string name;
  std::string version;  // empty: the user did not pin a version
  std::string str() const { return version.empty() ? name : name + "@" + version; }
  bool operator==(const DatasetRef&) const = default;
};

// Limits that keep a hostile value from bloating the job record.
inline constexpr std::size_t kMaxDatasetsPerJob = 64;
inline constexpr std::size_t kMaxDatasetNameLength = 128;

// Parses "a,b@v2,c". Throws saker::Error naming the bad element, the reason and the
// accepted syntax. Duplicates (same name and version) are rejected, not merged, so a
// typo'd list never passes silently.
std::vector<DatasetRef> parse_dataset_list(std::string_view text);

// Whether a recorded reference ("patients@v3", "patients") answers a query for `query`:
// a query without a version matches every version; one with a version matches that
// version and, setting *unpinned, a record that named no version (it may have been that
// one). For the reverse questions (saker-policy lineage, saker-ckpt find).
bool dataset_matches(const std::string& recorded, const DatasetRef& query, bool* unpinned);

// Canonical text of a list: the input order, comma-separated.
std::string format_dataset_list(const std::vector<DatasetRef>& refs);

// The environment variable the SPANK plugin records in the job's control
// environment (job_desc->spank_job_env), read back by job_submit.
inline constexpr const char* kDatasetsEnvName = "SAKER_DATASETS";

// Finds "SAKER_DATASETS=..." in a Slurm-style NAME=VALUE array and parses it.
// Returns an empty list when the job declared no datasets.
std::vector<DatasetRef> datasets_from_env(const char* const* env, std::size_t count);

}  // namespace saker::policy
