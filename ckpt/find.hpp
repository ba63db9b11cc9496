// saker-ckpt find (issue 30 §4): every checkpoint derived from a dataset, for erasure and
// restriction requests. A checkpoint is derived from it when its provenance record's
// enforced datasets (the site-signed attestation's) or its lineage (the datasets the
// program was told by flag) name it, or when one of its parents (by SHA-256) is derived
// from it: a resume, a fine-tune from another run, a sweep trial's base.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "saker/dataset_ref.hpp"

namespace saker::ckpt::find {

struct Found {
  std::filesystem::path file;
  std::uint64_t step = 0;
  std::string job_id;         // the writer's SLURM_JOB_ID ("" outside Slurm)
  std::string sha256;         // of the main file
  std::string why;            // "enforced patients@v3", "by flag patients", "parent <file>"
  bool version_unpinned = false;  // only because a record named no version
  int generation = 0;         // 0: names the dataset itself; N: through N parent links
};

struct Result {
  std::vector<Found> found;           // generation order, then path order
  std::vector<std::string> unreadable;  // "FILE: why": checkpoints that could not be judged
  std::size_t examined = 0;
};

// Searches every directory under each root (symbolic links not followed) for committed
// checkpoints. Throws saker::Error when a root is not a directory.
Result derived_from(const std::vector<std::filesystem::path>& roots, const policy::DatasetRef& query);

std::string table(const policy::DatasetRef& query, const Result& r);
std::string json(const policy::DatasetRef& query, const Result& r);

}  // namespace saker::ckpt::find
