#include "ckpt/load.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ckpt/format.hpp"
#include "ckpt/partition.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;

namespace {

void check_key(const format::FileMeta& meta, const crypto::Key* key, const fs::path& file) {
  if (meta.encryption == "none") {
    if (key != nullptr)
      throw Error(explain(file.string() + " is not encrypted", "this run is (a key was given), and an encrypted run refuses "
                                                               "plaintext checkpoints (a downgrade)",
                          "load an encrypted checkpoint of this run; saker-ckpt verify lists them"));
    return;
  }
  if (meta.encryption != crypto::kCipherName)
    throw KeyError(explain(file.string() + " uses encryption '" + meta.encryption + "'",
                           "this Saker knows only " + std::string(crypto::kCipherName), "use a matching Saker release"));
  if (key == nullptr)
    throw KeyError(explain(file.string() + " is encrypted (key id " + meta.key_id + ")", "no key file was given",
                           "pass the key it was written with (Options::key_file, saker-ckpt --key)"));
  if (key->id != meta.key_id)
    throw KeyError(explain(file.string() + " was encrypted with another key",
                           "the file's key id is " + meta.key_id + ", the given key's id is " + key->id,
                           "pass the key this checkpoint was written with"));
}

// Rows [first, first+rows) of the whole tensor, copied out of the saved parts.
Tensor assemble(const std::vector<Tensor>& parts, const Slice& want, const std::string& where) {
  const Tensor& any = parts.front();
  // Parts this rank needs none of were checked but not kept (empty bytes): sizes come
  // from dtype and shape.
  std::uint64_t row_bytes = dtype_size(any.dtype);
  for (std::size_t d = 1; d < any.shape.size(); ++d) row_bytes *= any.shape[d];
  auto storage = std::make_shared<std::vector<std::byte>>(want.rows * row_bytes);
  std::uint64_t next = 0;  // parts must tile the whole tensor without gaps or overlaps
  std::uint64_t part_first = 0;
  for (const Tensor& p : parts) {
    if (p.shape.size() != any.shape.size() || !std::equal(p.shape.begin() + 1, p.shape.end(), any.shape.begin() + 1) ||
        p.dtype != any.dtype || p.global_rows != any.global_rows)
      throw Error(explain(where + ": the saved parts of tensor " + any.name + " disagree",
                          "dtype, trailing dimensions or global rows differ between shards", "the checkpoint is damaged"));
    const std::uint64_t lo = std::max(part_first, want.first_row);
    const std::uint64_t hi = std::min(part_first + p.shape[0], want.first_row + want.rows);
    if (lo < hi)
      std::memcpy(storage->data() + (lo - want.first_row) * row_bytes, p.bytes.data() + (lo - part_first) * row_bytes,
                  (hi - lo) * row_bytes);
    part_first += p.shape[0];
    next = part_first;
  }
  if (next != any.global_rows)
    throw Error(explain(where + ": the saved parts of tensor " + any.name + " cover " + std::to_string(next) + " rows",
                        "its global shape has " + std::to_string(any.global_rows) + " rows", "the checkpoint is damaged"));
  Tensor t = Tensor::view(any.name, any.dtype, any.shape, *storage, Placement::partitioned);
  t.shape[0] = want.rows;
  t.global_rows = any.global_rows;
  t.storage = std::move(storage);
  return t;
}

// Whether this rank uses any bytes of a saved part, or only needs it checked.
bool needed(const TensorInfo& info, std::uint32_t rank, std::uint32_t world_size) {
  if (info.placement == Placement::replicated) return true;
  const Slice want = even_slice(info.global_shape[0], rank, world_size);
  return info.offset < want.first_row + want.rows && want.first_row < info.offset + info.shape[0];
}

// The part's metadata with no bytes (assemble reads only its shape, dtype and rows).
Tensor checked_only(const TensorInfo& info) {
  Tensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.placement = info.placement;
  t.global_rows = info.global_shape.empty() ? 0 : info.global_shape[0];
  return t;
}

}  // namespace

bool drop_read_cache(ReadCache mode, std::uint32_t world_size) {
  if (mode != ReadCache::automatic) return mode == ReadCache::drop;
  if (world_size <= 1) return true;
  const char* local = std::getenv("LOCAL_WORLD_SIZE");  // a hint for speed only, never for safety
  return local != nullptr && std::strcmp(local, "1") == 0;
}

LoadReport load_checkpoint(const fs::path& file, std::uint32_t rank, std::uint32_t world_size, const crypto::Key* key,
                           bool drop_behind, bool check_only, const Progress& progress,
                           std::unique_ptr<ParentDigest>* main_digest) {
  if (world_size == 0 || rank >= world_size)
    throw Error(explain("cannot load for rank " + std::to_string(rank) + " of " + std::to_string(world_size),
                        "the rank must be below the world size", "pass the caller's rank and world size"));
  // The key's id is checked before the manifests' tags, and both before any decryption.
  format::Reader reader(file, drop_behind, key);
  // Noted before any tensor is read: a change to the file from here on voids the digest.
  std::unique_ptr<ParentDigest> digest;
  if (main_digest != nullptr) digest = std::make_unique<ParentDigest>(reader.main_file_fd(), file.string(), drop_behind);
  const format::FileMeta& meta = reader.meta();
  if (!check_only || key != nullptr) check_key(meta, key, file);
  const std::uint64_t total = progress ? reader.total_stored_bytes() : 0;
  std::uint64_t done = 0;
  const format::Progress tick = [&](std::uint64_t n) {
    done += n;
    if (progress) progress(done, total);
  };

  LoadReport out;
  out.file = file;
  out.saved_world_size = meta.world_size;
  out.resharded = meta.world_size != world_size;
  State& st = out.state;
  st.step = meta.step;
  st.epoch = meta.epoch;
  st.world_size = world_size;
  st.rank = rank;
  st.run_id = meta.run_id;
  st.config = meta.config;
  st.lineage = meta.lineage;

  // Every shard is read and checked, even the ones this rank does not need: all ranks
  // must accept or reject the same checkpoint, or they would resume from different steps.
  std::map<std::string, std::vector<Tensor>> parts;  // partitioned tensors by name, in shard order
  const std::uint32_t own_shard = out.resharded ? 0 : rank;
  for (std::uint32_t s = 0; s < meta.world_size; ++s) {
    for (const TensorInfo& info : reader.tensors(s)) {
      if (info.placement == Placement::replicated && s != 0)
        throw Error(explain(file.string() + ": shard " + std::to_string(s) + " holds replicated tensor " + info.name,
                            "only rank 0 writes replicated tensors", "the checkpoint is damaged"));
      // Parts of other ranks are checked through a small reused buffer: reading them
      // whole would cost this rank world_size times the memory (and fresh pages) it keeps.
      Tensor t;
      if (needed(info, rank, world_size) && (!check_only || key != nullptr)) {
        t = reader.read_tensor(info, key, tick);
        if (check_only) t = checked_only(info);
      } else {
        reader.check_stored(info, tick);
        t = checked_only(info);
      }
      if (info.placement == Placement::replicated) {
        st.tensors.push_back(std::move(t));
      } else {
        std::uint64_t expected_offset = 0;
        for (const Tensor& p : parts[info.name]) expected_offset += p.shape[0];
        if (info.offset != expected_offset)
          throw Error(explain(file.string() + ": shard " + std::to_string(s) + " part of tensor " + info.name +
                                  " starts at row " + std::to_string(info.offset),
                              "the parts before it end at row " + std::to_string(expected_offset),
                              "the checkpoint is damaged"));
        parts[info.name].push_back(std::move(t));
      }
    }
    if (s == own_shard && !check_only) {
      st.rng_state = reader.read_blob(s, "rng_state", tick);
      st.data_cursor = reader.read_blob(s, "data_cursor", tick);
    } else {
      reader.check_blob(s, "rng_state", tick);
      reader.check_blob(s, "data_cursor", tick);
    }
  }
  for (auto& [name, list] : parts) {
    if (check_only) {
      // Nothing was kept to assemble: check only that the parts tile the whole tensor.
      std::uint64_t rows = 0;
      for (const Tensor& p : list) rows += p.shape[0];
      if (rows != list.front().global_rows)
        throw Error(explain(file.string() + ": the saved parts of tensor " + name + " cover " + std::to_string(rows) + " rows",
                            "its global shape has " + std::to_string(list.front().global_rows), "the checkpoint is damaged"));
      continue;
    }
    const Slice want = even_slice(list.front().global_rows, rank, world_size);
    if (!out.resharded && list.size() == world_size) {
      st.tensors.push_back(std::move(list[rank]));  // same layout: this rank's own part
      continue;
    }
    st.tensors.push_back(assemble(list, want, file.string()));
  }
  if (digest) {
    digest->start();
    *main_digest = std::move(digest);
  }
  return out;
}

}  // namespace saker::ckpt
