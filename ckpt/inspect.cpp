// Inspection for tools: metadata without reading data (describe), and full verification.
#include <sys/stat.h>

#include "ckpt/format.hpp"
#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

CheckpointInfo describe(const fs::path& file) {
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
  for (const fs::path& f : reader.files()) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) info.bytes += size;
  }
  for (std::uint32_t s = 0; s < m.world_size; ++s)
    for (TensorInfo& t : reader.tensors(s)) info.tensors.push_back(std::move(t));
  return info;
}

Verdict verify(const fs::path& file, const Progress& progress) {
  Verdict v;
  v.file = file;
  try {
    format::Reader reader(file);
    v.step = reader.meta().step;
    const std::uint64_t total = reader.total_stored_bytes();
    std::uint64_t done = 0;
    const format::Progress tick = [&](std::uint64_t n) {
      done += n;
      if (progress) progress(done, total);
    };
    for (std::uint32_t s = 0; s < reader.meta().world_size; ++s) {
      for (const TensorInfo& t : reader.tensors(s)) reader.check_stored(t, tick);
      for (const char* blob : {"rng_state", "data_cursor"}) reader.check_blob(s, blob, tick);
    }
    v.ok = true;
  } catch (const std::exception& e) {
    v.problem = e.what();
  }
  return v;
}

}  // namespace saker::ckpt
