#include "ckpt/format.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "ckpt/hash_behind.hpp"
#include "ckpt/partition.hpp"
#include "ckpt/stream_write.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/utc_time.hpp"

namespace saker::ckpt::format {
namespace fs = std::filesystem;

namespace {

std::string hex_of(const unsigned char* p, std::size_t n) { return hash::to_hex(p, n); }

// Datasets whose bytes (and so checksum) are still to be written: the checksum is
// computed while the bytes stream out (stream::write_regions) and set afterwards.
struct PendingData {
  std::vector<stream::Region> regions;
  std::vector<std::pair<h5::Id, std::size_t>> datasets;  // dataset, index in regions
};

// Creates one contiguous dataset with its space allocated now and no fill (we write the
// bytes ourselves), and remembers where its bytes go.
h5::Id create_dataset(const h5::Id& group, const std::string& name, const h5::Id& type,
                      const std::vector<std::uint64_t>& dims, std::span<const std::byte> bytes,
                      PendingData* pending) {
  h5::Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()),
                                               reinterpret_cast<const hsize_t*>(dims.data()), nullptr));
  h5::Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  h5::Id ds(H5Dcreate2(group.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!ds) throw Error(explain("cannot create dataset " + name, "HDF5 refused it", "check the name and free space"));
  if (bytes.empty()) {
    h5::set_attr(ds.get(), "xxh3_128", hash::xxh3_128(bytes.data(), 0).hex());
    return ds;
  }
  const haddr_t off = H5Dget_offset(ds.get());
  SAKER_ASSERT(off != HADDR_UNDEF, "early allocation gives contiguous datasets an address");
  pending->regions.push_back({off, bytes, {}});
  // A second handle stays open until the checksum attribute is set.
  h5::Id keep(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT));
  if (!keep) throw Error(explain("cannot reopen dataset " + name, "HDF5 refused it", "check free space"));
  pending->datasets.emplace_back(std::move(keep), pending->regions.size() - 1);
  return ds;
}

void set_root_attrs(hid_t root, const FileMeta& meta, std::uint32_t rank) {
  h5::set_attr(root, "saker_format", std::string(kFormatName));
  h5::set_attr(root, "format_version", meta.format_version);
  h5::set_attr(root, "step", meta.step);
  h5::set_attr(root, "epoch", meta.epoch);
  h5::set_attr(root, "world_size", std::uint64_t{meta.world_size});
  h5::set_attr(root, "rank", std::uint64_t{rank});
  h5::set_attr(root, "created_unix", meta.created_unix);
  h5::set_attr(root, "created", utc_iso(meta.created_unix));
  h5::set_attr(root, "saker_version", meta.saker_version);
  h5::set_attr(root, "config", meta.config);
  h5::set_attr(root, "lineage", format_lineage(meta.lineage));
  h5::set_attr(root, "encryption", meta.encryption);
  h5::set_attr(root, "key_id", meta.key_id);
}

}  // namespace

std::string main_file_name(std::uint64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012" PRIu64 ".h5", step);
  return buf;
}

std::string shard_file_name(std::uint64_t step, std::uint32_t rank) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "ckpt-%012" PRIu64 ".shard-%05" PRIu32 ".h5", step, rank);
  return buf;
}

std::string shard_group_name(std::uint32_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%05" PRIu32, rank);
  return buf;
}

bool parse_main_file_name(const std::string& name, std::uint64_t* step) {
  if (name.size() != std::strlen("ckpt-000000000000.h5") || name.rfind("ckpt-", 0) != 0 ||
      name.substr(17) != ".h5")
    return false;
  const std::string digits = name.substr(5, 12);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *step = std::strtoull(digits.c_str(), nullptr, 10);
  return true;
}

bool parse_shard_file_name(const std::string& name, std::uint64_t* step, std::uint32_t* rank) {
  if (name.size() != std::strlen("ckpt-000000000000.shard-00000.h5") || name.rfind("ckpt-", 0) != 0 ||
      name.substr(17, 7) != ".shard-" || name.substr(29) != ".h5")
    return false;
  const std::string s = name.substr(5, 12), r = name.substr(24, 5);
  if (s.find_first_not_of("0123456789") != std::string::npos || r.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *step = std::strtoull(s.c_str(), nullptr, 10);
  *rank = static_cast<std::uint32_t>(std::strtoul(r.c_str(), nullptr, 10));
  return true;
}

namespace {

// Fills a manifest entry from the region its bytes were streamed to.
manifest::Entry entry_for(const std::string& name, DType dtype, const std::vector<std::uint64_t>& shape,
                          const stream::Region* region) {
  manifest::Entry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = shape;
  e.file_offset = region ? region->offset : 0;
  e.bytes = region ? region->bytes.size() : 0;
  e.xxh3 = region ? region->xxh3.hex() : hash::xxh3_128(nullptr, 0).hex();
  return e;
}

}  // namespace

manifest::Manifest write_file(const fs::path& path, const FileMeta& meta, const ShardOut& shard,
                              const std::vector<std::pair<std::uint32_t, std::string>>& linked, const crypto::Key* key) {
  manifest::Manifest m;
  m.run_id = meta.run_id;
  m.step = meta.step;
  m.epoch = meta.epoch;
  m.world_size = meta.world_size;
  m.rank = shard.rank;
  m.created_unix = meta.created_unix;
  m.saker_version = meta.saker_version;
  m.config = meta.config;
  m.lineage = format_lineage(meta.lineage);
  m.encryption = meta.encryption;
  m.key_id = meta.key_id;
  if (shard.rank == 0) m.provenance = meta.provenance;
  for (const Tensor& t : shard.tensors) {
    manifest::Entry e;
    e.name = t.name;
    e.shape = t.shape;
    m.tensors.push_back(e);
  }
  m.user_block = manifest::user_block_for(manifest::estimate(m, linked.size()));

  PendingData pending;
  std::vector<crypto::Sealed> sealed;  // ciphertexts must outlive the raw writes
  sealed.reserve(shard.tensors.size());
  std::vector<std::optional<std::size_t>> region_of(shard.tensors.size() + 2);  // index in pending.regions
  {
    h5::Id file = h5::create_file(path, m.user_block);
    h5::Id root(H5Gopen2(file.get(), "/", H5P_DEFAULT));
    set_root_attrs(root.get(), meta, shard.rank);
    h5::Id group = h5::create_group(file, shard_group_name(shard.rank));
    h5::set_attr(group.get(), "rank", std::uint64_t{shard.rank});
    h5::set_attr(group.get(), "step", meta.step);
    h5::set_attr(group.get(), "world_size", std::uint64_t{meta.world_size});
    h5::Id tensors = h5::create_group(group, "tensors");
    for (std::size_t i = 0; i < shard.tensors.size(); ++i) {
      const Tensor& t = shard.tensors[i];
      manifest::Entry& e = m.tensors[i];
      const std::size_t before = pending.regions.size();
      h5::Id ds;
      if (key != nullptr) {
        sealed.push_back(crypto::seal(*key, t.bytes, manifest::tensor_aad(meta.run_id, meta.step, shard.rank, t.name)));
        const crypto::Sealed& s = sealed.back();
        ds = create_dataset(tensors, t.name, h5::raw_bytes_type(), {s.ciphertext.size()}, s.ciphertext, &pending);
        e.encrypted = true;
        e.nonce = hex_of(s.nonce.data(), s.nonce.size());
        e.tag = hex_of(s.tag.data(), s.tag.size());
        h5::set_attr(ds.get(), "encryption", std::string(crypto::kCipherName));
        h5::set_attr(ds.get(), "nonce", e.nonce);
        h5::set_attr(ds.get(), "tag", e.tag);
      } else {
        ds = create_dataset(tensors, t.name, h5::type_for(static_cast<std::uint8_t>(t.dtype)), t.shape, t.bytes, &pending);
      }
      if (pending.regions.size() > before) region_of[i] = before;
      e.dtype = t.dtype;
      h5::set_attr(ds.get(), "dtype", std::string(dtype_name(t.dtype)));
      h5::set_attr(ds.get(), "shape", t.shape);
      h5::set_attr(ds.get(), "placement", std::string(t.placement == Placement::replicated ? "replicated" : "partitioned"));
      if (t.placement == Placement::partitioned) {
        const Slice slice = slice_for(t, shard.rank, meta.world_size);
        std::vector<std::uint64_t> global = t.shape;
        global[0] = slice.global_rows;
        h5::set_attr(ds.get(), "global_shape", global);
        h5::set_attr(ds.get(), "offset", slice.first_row);
        e.placement = Placement::partitioned;
        e.global_shape = global;
        e.first_row = slice.first_row;
      }
    }
    const std::size_t n = shard.tensors.size();
    std::size_t before = pending.regions.size();
    create_dataset(group, "rng_state", h5::raw_bytes_type(), {shard.rng_state.size()}, shard.rng_state, &pending);
    if (pending.regions.size() > before) region_of[n] = before;
    before = pending.regions.size();
    create_dataset(group, "data_cursor", h5::raw_bytes_type(), {shard.data_cursor.size()}, shard.data_cursor, &pending);
    if (pending.regions.size() > before) region_of[n + 1] = before;
    for (const auto& [rank, file_name] : linked)
      h5::external_link(file, shard_group_name(rank), file_name, "/" + shard_group_name(rank));
    // The bytes go out through our own descriptor while HDF5 still holds the file: they
    // land in space HDF5 allocated and never touches (no fill), and their checksums are
    // known only once they are written.
    stream::write_regions(path, pending.regions);
    for (const auto& [ds, index] : pending.datasets)
      h5::set_attr(ds.get(), "xxh3_128", pending.regions[index].xxh3.hex());
    pending.datasets.clear();
    h5::flush(file, path);
  }  // closing the file sets its size to cover every allocated dataset
  auto region = [&](std::size_t i) -> const stream::Region* {
    return region_of[i] ? &pending.regions[*region_of[i]] : nullptr;
  };
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const stream::Region* r = region(i);
    m.tensors[i].file_offset = r ? r->offset : 0;
    m.tensors[i].bytes = r ? r->bytes.size() : 0;
    m.tensors[i].xxh3 = (r ? r->xxh3 : hash::xxh3_128(nullptr, 0)).hex();
  }
  m.rng_state = entry_for("rng_state", DType::u8, {shard.rng_state.size()}, region(m.tensors.size()));
  m.data_cursor = entry_for("data_cursor", DType::u8, {shard.data_cursor.size()}, region(m.tensors.size() + 1));
  return m;
}

std::uint64_t tensor_bytes(const manifest::Manifest& m) {
  std::uint64_t n = 0;
  for (const manifest::Entry& e : m.tensors) n += e.bytes;
  return n;
}

}  // namespace saker::ckpt::format
