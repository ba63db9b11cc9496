// Listing and retention: which committed checkpoints a directory holds, and which to drop.
#include <algorithm>
#include <set>

#include "ckpt/commit.hpp"
#include "ckpt/format.hpp"
#include "common/log.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

std::uint64_t step_in_name(const fs::path& main_file) {
  std::uint64_t step = 0;
  return format::parse_main_file_name(main_file.filename().string(), &step) ? step : 0;
}

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

namespace {

// Whether a checkpoint counts toward the retention rule. After each save only the
// manifests are checked (every byte outside the data, the shard bindings: cheap); the
// CLI reads every byte (the same judgement as a resume, without a key).
bool intact(const fs::path& main, bool full, const Progress& progress, std::string* why) {
  if (full) {
    const Verdict v = verify(main, progress);
    *why = v.problem;
    return v.ok;
  }
  try {
    format::Reader reader(main);
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace

std::vector<fs::path> prune(const fs::path& dir, std::uint32_t keep_last, std::uint64_t keep_every) {
  PruneOptions o;
  o.keep_last = keep_last;
  o.keep_every = keep_every;
  return prune(dir, o).removed;
}

PruneReport prune(const fs::path& dir, const PruneOptions& o) {
  PruneReport report;
  const auto mains = list_checkpoints(dir);
  if (mains.empty()) return report;
  std::vector<std::uint64_t> steps, verified;
  std::vector<bool> ok;
  for (std::size_t i = 0; i < mains.size(); ++i) {
    const fs::path& m = mains[i];
    std::uint64_t s = 0;
    format::parse_main_file_name(m.filename().string(), &s);
    steps.push_back(s);
    std::string why;
    const Progress progress = o.full_verify && o.progress ? o.progress(i, mains.size(), m) : Progress();
    ok.push_back(intact(m, o.full_verify, progress, &why));
    if (ok.back()) verified.push_back(s);
    else report.damaged.push_back(m.string() + ": " + why);
  }
  std::set<std::uint64_t> keep;
  // Only verified checkpoints count toward keep_last; the newest verified always stays.
  const std::size_t from = o.keep_last == 0 || verified.size() <= o.keep_last ? 0 : verified.size() - o.keep_last;
  for (std::size_t i = from; i < verified.size(); ++i) keep.insert(verified[i]);
  for (std::uint64_t s : verified)
    if (o.keep_every != 0 && s % o.keep_every == 0) keep.insert(s);
  const std::uint64_t newest_verified = verified.empty() ? 0 : verified.back();
  // Damaged checkpoints newer than the newest verified one stay (evidence for the user,
  // and nothing is deleted when none verifies); older damaged ones can never be resumed.
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (!ok[i] && (verified.empty() || steps[i] > newest_verified)) keep.insert(steps[i]);
  // What the "latest" pointer names stays too (a reader may be following it right now).
  if (auto latest = commit::read_latest(dir)) {
    std::uint64_t s = 0;
    if (format::parse_main_file_name(*latest, &s)) keep.insert(s);
  }

  std::error_code ec;
  auto remove = [&](const fs::path& f) {
    if (o.dry_run || fs::remove(f, ec)) report.removed.push_back(f);
  };
  // Main files first: once it is gone the checkpoint no longer exists for readers, and the
  // shard files are merely garbage.
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (keep.count(steps[i])) report.kept.push_back(mains[i]);
    else remove(mains[i]);
  }
  // Shard files of dropped checkpoints, and orphans of failed saves older than the newest
  // verified checkpoint.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::uint64_t step = 0;
    std::uint32_t rank = 0;
    if (!format::parse_shard_file_name(entry.path().filename().string(), &step, &rank)) continue;
    if (!verified.empty() && step < newest_verified && !keep.count(step)) remove(entry.path());
  }
  if (!report.removed.empty() && !o.dry_run) {
    commit::fsync_path(dir);
    log::debug("ckpt: retention removed " + std::to_string(report.removed.size()) + " file(s) from " + dir.string());
  }
  return report;
}

}  // namespace saker::ckpt
