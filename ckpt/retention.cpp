// Listing and retention: which committed checkpoints a directory holds, and which to drop.
#include <algorithm>
#include <set>

#include "ckpt/commit.hpp"
#include "ckpt/format.hpp"
#include "common/log.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<std::uint64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::uint64_t step = 0;
    if (format::parse_main_file_name(entry.path().filename().string(), &step)) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<fs::path> prune(const fs::path& dir, std::uint32_t keep_last, std::uint64_t keep_every) {
  std::vector<fs::path> removed;
  const auto mains = list_checkpoints(dir);
  if (mains.empty()) return removed;
  std::set<std::uint64_t> keep;
  std::vector<std::uint64_t> steps;
  for (const auto& m : mains) {
    std::uint64_t s = 0;
    format::parse_main_file_name(m.filename().string(), &s);
    steps.push_back(s);
  }
  const std::uint64_t newest = steps.back();
  keep.insert(newest);  // never remove the newest, whatever the rule says
  if (keep_last == 0) keep.insert(steps.begin(), steps.end());
  for (std::size_t i = steps.size() > keep_last ? steps.size() - keep_last : 0; i < steps.size(); ++i) keep.insert(steps[i]);
  for (std::uint64_t s : steps)
    if (keep_every != 0 && s % keep_every == 0) keep.insert(s);
  // What the "latest" pointer names stays too (a reader may be following it right now).
  if (auto latest = commit::read_latest(dir)) {
    std::uint64_t s = 0;
    if (format::parse_main_file_name(*latest, &s)) keep.insert(s);
  }

  std::error_code ec;
  // Main files first: once it is gone the checkpoint no longer exists for readers, and the
  // shard files are merely garbage.
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (!keep.count(steps[i]) && fs::remove(mains[i], ec)) removed.push_back(mains[i]);
  // Shard files of dropped checkpoints, and orphans of failed saves older than the newest.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::uint64_t step = 0;
    std::uint32_t rank = 0;
    if (!format::parse_shard_file_name(entry.path().filename().string(), &step, &rank)) continue;
    if (step < newest && !keep.count(step) && fs::remove(entry.path(), ec)) removed.push_back(entry.path());
  }
  if (!removed.empty()) {
    commit::fsync_path(dir);
    log::debug("ckpt: retention removed " + std::to_string(removed.size()) + " file(s) from " + dir.string());
  }
  return removed;
}

}  // namespace saker::ckpt
