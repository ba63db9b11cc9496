// Inspection for tools: metadata without reading data (describe), and full verification.
#include <sys/stat.h>

#include <cstdio>
#include <optional>

#include "ckpt/format.hpp"
#include "ckpt/load.hpp"
#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

std::vector<std::string> exposure_warnings(const DestinationGuard& guard, const fs::path& main_file) {
  std::vector<std::string> lines;
  format::Reader reader(main_file);
  if (!guard.restricted(reader.meta().lineage)) return lines;
  for (const fs::path& f : reader.files()) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0 || (st.st_mode & 077) == 0) continue;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode) & 07777);
    lines.push_back(f.string() + ": mode " + mode + " lets " + ((st.st_mode & 07) != 0 ? "every user" : "its group") +
                    " read a checkpoint of restricted data (lineage " + format_lineage(reader.meta().lineage) +
                    "); fix: chmod 600 " + f.string());
  }
  return lines;
}

CheckpointInfo describe(const fs::path& file) {
  std::uint64_t step = 0;
  std::uint32_t rank = 0;
  if (format::parse_shard_file_name(file.filename().string(), &step, &rank))
    throw Error(explain(file.string() + " is the shard file of rank " + std::to_string(rank),
                        "a checkpoint is described by its main file, which lists every shard",
                        "use " + (file.parent_path() / format::main_file_name(step)).string()));
  format::Reader reader(file);
  const format::FileMeta& m = reader.meta();
  CheckpointInfo info;
  info.file = file;
  info.run_id = m.run_id;
  info.step = m.step;
  info.epoch = m.epoch;
  info.world_size = m.world_size;
  info.created_unix = m.created_unix;
  info.saker_version = m.saker_version;
  info.format_version = static_cast<std::uint32_t>(m.format_version);
  info.config = m.config;
  info.lineage = m.lineage;
  info.encryption = m.encryption;
  info.key_id = m.key_id;
  info.provenance = m.provenance;
  for (const fs::path& f : reader.files()) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) info.bytes += size;
  }
  for (std::uint32_t s = 0; s < m.world_size; ++s)
    for (TensorInfo& t : reader.tensors(s)) info.tensors.push_back(std::move(t));
  return info;
}

Verdict verify(const fs::path& file, const Progress& progress, const fs::path& key_file) {
  Verdict v;
  v.file = file;
  std::uint64_t step = 0;
  if (format::parse_main_file_name(file.filename().string(), &step)) v.step = step;
  try {
    std::optional<crypto::Key> key;
    if (!key_file.empty()) key = crypto::load_key(key_file);
    // The very code path a resume takes (rank 0 of the saved world size).
    const LoadReport r = load_checkpoint(file, 0, 1, key ? &*key : nullptr, false, true, progress);
    v.step = r.state.step;
    v.ok = true;
  } catch (const std::exception& e) {
    // Callers print the file beside the problem: name it once (problems in a shard file
    // or a tensor keep their own, longer, location).
    v.problem = e.what();
    const std::string prefix = file.string() + ": ";
    if (v.problem.rfind(prefix, 0) == 0) v.problem.erase(0, prefix.size());
  }
  return v;
}

}  // namespace saker::ckpt
