#include "sweep/parents.hpp"

#include <cstdlib>

#include "ckpt/provenance.hpp"
#include "saker/ckpt.hpp"

namespace saker::sweep {

std::optional<std::filesystem::path> resume_point(const std::filesystem::path& lineage) {
  std::error_code ec;
  if (!std::filesystem::is_directory(lineage, ec)) return std::nullopt;
  const auto all = saker::ckpt::list_checkpoints(lineage);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (saker::ckpt::verify(*it).ok) return *it;
  return std::nullopt;
}

std::string segment_parents(const std::filesystem::path& lineage, const std::string& inherited) {
  if (const auto from = resume_point(lineage)) return "sha256:" + saker::ckpt::provenance::file_sha256(*from);
  return inherited;
}

void add_parents(Command& cmd, const std::filesystem::path& lineage) {
  const char* inherited = std::getenv("SAKER_CKPT_PARENTS");
  const std::string parents = segment_parents(lineage, inherited != nullptr ? inherited : "");
  if (!parents.empty()) cmd.env.emplace_back("SAKER_CKPT_PARENTS", parents);
}

}  // namespace saker::sweep
