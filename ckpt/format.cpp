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

// Pieces small enough to stay in cache between the read and the checksum.
constexpr std::size_t kPiece = std::size_t{8} << 20;

std::string hex_of(const unsigned char* p, std::size_t n) { return hash::to_hex(p, n); }

[[noreturn]] void damaged(const std::string& where, const std::string& why) {
  throw Error(explain(where, why, "this checkpoint is damaged; load an older one (saker-ckpt verify lists the intact ones)"));
}

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

// ---------------------------------------------------------------- reading

struct Reader::Located {
  std::string where;      // "FILE:/shard_00001/tensors/w" for messages
  std::string data_file;  // the file holding the bytes (a shard file for linked shards)
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::string xxh3;
};

namespace {

void check_binding(const manifest::Manifest& m, const manifest::Manifest& main, std::uint32_t rank, const std::string& where) {
  if (m.run_id != main.run_id)
    damaged(where, "the shard belongs to another run (run id " + m.run_id + ", the main file's is " + main.run_id + ")");
  if (m.step != main.step || m.world_size != main.world_size || m.rank != rank)
    damaged(where, "the shard belongs to another checkpoint (step " + std::to_string(m.step) + ", world size " +
                       std::to_string(m.world_size) + ", rank " + std::to_string(m.rank) + "; expected step " +
                       std::to_string(main.step) + ", world size " + std::to_string(main.world_size) + ", rank " +
                       std::to_string(rank) + ")");
  if (m.encryption != main.encryption || m.key_id != main.key_id || m.config != main.config || m.lineage != main.lineage ||
      m.epoch != main.epoch)
    damaged(where, "the shard disagrees with its main file on encryption, key, config, lineage or epoch");
}

}  // namespace

manifest::Opened open_shard(const fs::path& file, const manifest::Manifest& main, std::uint32_t rank) {
  manifest::Opened o = manifest::open_checked(file);
  check_binding(o.manifest, main, rank, file.string());
  return o;
}

namespace {

// A checkpoint file that is not there, is a directory or cannot be opened is not damaged:
// say what it is and the fix (open_checked calls whatever it cannot read damaged, which is
// right for a shard its main file names).
void check_openable(const fs::path& file) {
  struct stat st{};
  const std::string where = file.string();
  if (::stat(file.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      throw Error(explain(where + " does not exist", std::strerror(err),
                          "check the path; saker-ckpt ls DIR lists a directory's checkpoints"));
    throw Error(explain("cannot open " + where, std::strerror(err), "check the path and its directories' permissions"));
  }
  if (S_ISDIR(st.st_mode))
    throw Error(explain(where + " is a directory", "a checkpoint is a ckpt-STEP.h5 file",
                        "name a file in it (saker-ckpt ls " + where + " lists them)"));
  if (::access(file.c_str(), R_OK) != 0)
    throw Error(explain("cannot open " + where, std::strerror(errno),
                        "checkpoints are written 0600 for their owner: read it as that user"));
}

}  // namespace

Reader::Reader(const fs::path& file, bool drop_behind, const crypto::Key* key) : file_(file), drop_behind_(drop_behind) {
  const std::string where = file.string();
  check_openable(file);
  shards_.push_back(manifest::open_checked(file));
  paths_.push_back(file);
  const manifest::Manifest m = shards_[0].manifest;  // a copy: shards_ grows below
  // What the file's name says must be what it holds: a renamed file would resume from
  // the wrong step, and a shard file is not a checkpoint by itself.
  const std::string name = file.filename().string();
  std::uint64_t name_step = 0;
  std::uint32_t name_rank = 0;
  if (parse_shard_file_name(name, &name_step, &name_rank) || m.rank != 0)
    damaged(where, "is the shard file of rank " + std::to_string(m.rank) + "; its checkpoint is " +
                       (file.parent_path() / main_file_name(m.step)).string());
  if (parse_main_file_name(name, &name_step) && name_step != m.step)
    damaged(where, "its name says step " + std::to_string(name_step) + " but it holds step " + std::to_string(m.step) +
                       " (renamed?)");
  if (m.shards.size() != m.world_size - 1) damaged(where, "its manifest lists " + std::to_string(m.shards.size()) +
                                                              " shard files for world size " + std::to_string(m.world_size));
  if (key != nullptr) manifest::authenticate(shards_[0], *key, where);
  for (std::uint32_t r = 1; r < m.world_size; ++r) {
    const manifest::ShardRef& ref = m.shards[r - 1];
    if (ref.rank != r || ref.file != shard_file_name(m.step, r)) damaged(where, "its manifest lists a wrong shard file");
    const fs::path shard_path = file.parent_path() / ref.file;
    std::error_code ec;
    if (!fs::exists(shard_path, ec)) damaged(shard_path.string(), "the shard file of rank " + std::to_string(r) + " is missing");
    manifest::Opened o = open_shard(shard_path, m, r);
    if (o.manifest_xxh3 != ref.manifest_xxh3)
      damaged(shard_path.string(), "is not the shard file this checkpoint was written with (its manifest checksum " +
                                       o.manifest_xxh3 + " differs from " + ref.manifest_xxh3 + " in " + name + ")");
    if (key != nullptr) manifest::authenticate(o, *key, shard_path.string());
    shards_.push_back(std::move(o));
    paths_.push_back(shard_path);
  }
  meta_.run_id = m.run_id;
  meta_.format_version = m.format_version;
  meta_.step = m.step;
  meta_.epoch = m.epoch;
  meta_.world_size = m.world_size;
  meta_.created_unix = m.created_unix;
  meta_.saker_version = m.saker_version;
  meta_.config = m.config;
  meta_.lineage = parse_lineage(m.lineage);
  meta_.encryption = m.encryption;
  meta_.key_id = m.key_id;
  meta_.provenance = m.provenance;
}

Reader::~Reader() {
  for (auto& [name, fd] : fds_) ::close(fd);
}

std::vector<TensorInfo> Reader::tensors(std::uint32_t shard) {
  SAKER_ASSERT(shard < shards_.size(), "shard index within the world size");
  const std::string where = file_.string() + ":/" + shard_group_name(shard);
  std::vector<TensorInfo> out;
  std::set<std::string> seen;
  for (const manifest::Entry& e : shards_[shard].manifest.tensors) {
    const std::string w = where + "/tensors/" + e.name;
    if (!seen.insert(e.name).second) damaged(w, "the tensor appears twice");
    TensorInfo info;
    info.shard = shard;
    info.name = e.name;
    info.dtype = e.dtype;
    info.shape = e.shape;
    info.placement = e.placement;
    info.encrypted = e.encrypted;
    info.xxh3_128 = e.xxh3;
    info.stored_bytes = e.bytes;
    if (info.placement == Placement::partitioned) {
      info.global_shape = e.global_shape;
      info.offset = e.first_row;
      if (info.shape.empty() || info.global_shape.size() != info.shape.size() ||
          info.offset > info.global_shape[0] || info.shape[0] > info.global_shape[0] - info.offset)
        damaged(w, "partitioned tensor without a matching global_shape");
    }
    // Overflow-safe: dtype_size(dtype) * product(shape) must equal the stored bytes.
    std::uint64_t expect = dtype_size(info.dtype);
    for (std::uint64_t d : info.shape) {
      if (d != 0 && expect > info.stored_bytes / d + 1) {
        expect = ~std::uint64_t{0};
        break;
      }
      expect *= d;
    }
    if (info.stored_bytes != expect)
      damaged(w, "stores " + std::to_string(info.stored_bytes) + " bytes but its dtype and shape need another size");
    out.push_back(std::move(info));
  }
  return out;
}

const manifest::Entry& Reader::entry(std::uint32_t shard, const std::string& name) {
  SAKER_ASSERT(shard < shards_.size(), "shard index within the world size");
  const manifest::Manifest& m = shards_[shard].manifest;
  if (name == "rng_state") return m.rng_state;
  if (name == "data_cursor") return m.data_cursor;
  for (const manifest::Entry& e : m.tensors)
    if (e.name == name) return e;
  damaged(file_.string() + ":/" + shard_group_name(shard) + "/" + name, "the dataset is missing");
}

Reader::Located Reader::locate(std::uint32_t shard, const manifest::Entry& e) {
  Located loc;
  loc.where = file_.string() + ":/" + shard_group_name(shard) + "/" + e.name;
  loc.data_file = paths_[shard].string();
  loc.offset = e.file_offset;
  loc.size = e.bytes;
  loc.xxh3 = e.xxh3;
  return loc;
}

void Reader::read_located(const Located& loc, std::byte* dst, const Progress& progress) {
  hash::Digest128 digest = hash::xxh3_128(nullptr, 0);
  if (loc.size > 0) {
    auto it = fds_.find(loc.data_file);
    if (it == fds_.end()) {
      const int fd = ::open(loc.data_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) damaged(loc.where, "cannot open " + loc.data_file + ": " + std::strerror(errno));
      it = fds_.emplace(loc.data_file, fd).first;
    }
    digest = read_pieces(it->second, loc, dst, progress);
  }
  const std::string got = digest.hex();
  if (got != loc.xxh3)
    damaged(loc.where, "checksum mismatch: stored xxh3-128 " + loc.xxh3 + ", data hashes to " + got);
}

void Reader::populate(std::byte* p, std::size_t size) {
  // Whole pages inside [p, p + size) only: the pages at the edges may belong to others.
  const std::uintptr_t page = 4096;
  const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
  const std::uintptr_t to = (reinterpret_cast<std::uintptr_t>(p) + size) & ~(page - 1);
  if (to <= from) return;
  // MADV_POPULATE_WRITE (Linux 5.14) never changes bytes already there, so racing with
  // the read into the same pages is safe. Older kernels: the read faults them in itself.
  if (::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
    populate_ = false;
}

hash::Digest128 Reader::read_pieces(int fd, const Located& loc, std::byte* dst, const Progress& progress) {
  // Small data is hashed inline: handing it to the helper would cost more than the hash.
  const bool behind = loc.size > kPiece;
  if (behind && !hasher_) hasher_ = std::make_unique<HashBehind>();
  std::optional<hash::Xxh3Stream> inline_sum;
  if (behind) hasher_->reset(); else inline_sum.emplace();
  // Whatever happens, the helper is done with our buffers before they can be freed.
  struct Drain {
    HashBehind* h;
    ~Drain() {
      if (h) h->wait_until_pending(0);
    }
  } drain{behind ? hasher_.get() : nullptr};
  if (dst == nullptr && scratch_.size() < 2 * kPiece) scratch_.resize(2 * kPiece);
  std::uint64_t done = 0;
  for (std::size_t index = 0; done < loc.size; ++index) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, loc.size - done));
    const std::uint64_t at = loc.offset + done;
    std::byte* piece = dst != nullptr ? dst + done : scratch_.data() + (index % 2) * kPiece;
    // Check-only reads alternate two buffers: the one read two pieces ago must be hashed.
    if (dst == nullptr && behind) hasher_->wait_until_pending(1);
    // Fresh destination memory costs a page fault per 4 KiB page, as much as the read
    // itself on our VMs: the helper faults the next piece in while we read this one.
    if (dst != nullptr && behind && populate_ && done + want < loc.size)
      hasher_->run([this, next = dst + done + want, size = std::min<std::uint64_t>(kPiece, loc.size - done - want)] {
        populate(next, size);
      });
    std::size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, piece + got, want - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) damaged(loc.where, std::string("read error: ") + std::strerror(errno));
      if (r == 0) damaged(loc.where, "the file is truncated (the data ends early)");
      got += static_cast<std::size_t>(r);
    }
    // The bytes are in `piece` now, so the page cache behind them may go. From the start
    // of the page holding `at`: bytes before it in that page were read already (or are
    // HDF5 metadata, which HDF5 rereads if it needs them); the kernel keeps the partial
    // page at the end, which the next piece drops. Freeing pages takes time too, so the
    // helper does it after the hash.
    std::function<void()> drop;
    if (drop_behind_) {
      const std::uint64_t from = at & ~std::uint64_t{4095};
      drop = [fd, from, end = at + want] {
        ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(end - from), POSIX_FADV_DONTNEED);
      };
    }
    if (behind) {
      hasher_->add(piece, want, std::move(drop));
    } else {
      inline_sum->update(piece, want);
      if (drop) drop();
    }
    done += want;
    if (progress) progress(want);
  }
  return behind ? hasher_->digest() : inline_sum->digest();
}

void Reader::read_stored(const TensorInfo& info, std::byte* dst, const Progress& progress) {
  Located loc = locate(info.shard, entry(info.shard, info.name));
  if (loc.size != info.stored_bytes) damaged(loc.where, "size changed while reading");
  read_located(loc, dst, progress);
}

void Reader::check_stored(const TensorInfo& info, const Progress& progress) { read_stored(info, nullptr, progress); }

Tensor Reader::read_tensor(const TensorInfo& info, const crypto::Key* key, const Progress& progress) {
  // Uninitialised storage: the read overwrites every byte, so zero-filling would only cost time.
  std::shared_ptr<std::byte[]> bytes(new std::byte[std::max<std::uint64_t>(info.stored_bytes, 1)]);
  read_stored(info, bytes.get(), progress);
  const std::string where = file_.string() + ":/" + shard_group_name(info.shard) + "/tensors/" + info.name;
  if (info.encrypted) {
    if (key == nullptr)
      throw Error(explain(where + " is encrypted", "no key was given", "pass the key file (Options::key_file, --key)"));
    const manifest::Entry& e = entry(info.shard, info.name);
    const auto nonce = crypto::from_hex(e.nonce, where + " nonce");
    const auto tag = crypto::from_hex(e.tag, where + " tag");
    if (nonce.size() != crypto::kNonceSize || tag.size() != crypto::kTagSize) damaged(where, "bad nonce or tag");
    std::shared_ptr<std::byte[]> plain(new std::byte[std::max<std::uint64_t>(info.stored_bytes, 1)]);
    crypto::open(*key, {bytes.get(), info.stored_bytes}, nonce.data(), tag.data(),
                 manifest::tensor_aad(meta_.run_id, meta_.step, info.shard, info.name), {plain.get(), info.stored_bytes}, where);
    bytes = std::move(plain);
  } else if (key != nullptr) {
    damaged(where, "is plaintext, but this run is encrypted: an encrypted run refuses plaintext tensors");
  }
  Tensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.placement = info.placement;
  if (info.placement == Placement::partitioned) t.global_rows = info.global_shape[0];
  t.bytes = {bytes.get(), info.stored_bytes};
  t.storage = std::move(bytes);
  return t;
}

std::vector<std::byte> Reader::read_blob(std::uint32_t shard, const char* name, const Progress& progress) {
  Located loc = locate(shard, entry(shard, name));
  std::vector<std::byte> out(loc.size);
  read_located(loc, out.data(), progress);
  return out;
}

void Reader::check_blob(std::uint32_t shard, const char* name, const Progress& progress) {
  read_located(locate(shard, entry(shard, name)), nullptr, progress);
}

std::uint64_t Reader::total_stored_bytes() {
  std::uint64_t total = 0;
  for (const manifest::Opened& o : shards_) {
    total += tensor_bytes(o.manifest);
    total += o.manifest.rng_state.bytes + o.manifest.data_cursor.bytes;
  }
  return total;
}

std::vector<fs::path> Reader::files() const { return paths_; }

}  // namespace saker::ckpt::format
