#include "ckpt/format.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>

#include "ckpt/hash_behind.hpp"
#include "ckpt/partition.hpp"
#include "ckpt/stream_write.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"

namespace saker::ckpt::format {
namespace fs = std::filesystem;

namespace {

// Pieces small enough to stay in cache between the read and the checksum.
constexpr std::size_t kPiece = std::size_t{8} << 20;

std::string hex_of(const unsigned char* p, std::size_t n) { return hash::to_hex(p, n); }

std::string aad_for(std::uint64_t step, std::uint32_t shard, const std::string& name) {
  return "saker-ckpt/1/" + std::to_string(step) + "/" + std::to_string(shard) + "/" + name;
}

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
  char iso[32];
  const std::time_t t = static_cast<std::time_t>(meta.created_unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  h5::set_attr(root, "created", std::string(iso));
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

std::uint64_t write_file(const fs::path& path, const FileMeta& meta, const ShardOut& shard,
                         const std::vector<std::pair<std::uint32_t, std::string>>& linked, const crypto::Key* key) {
  PendingData pending;
  std::vector<crypto::Sealed> sealed;  // ciphertexts must outlive the raw writes
  sealed.reserve(shard.tensors.size());
  std::uint64_t tensor_bytes = 0;
  {
    h5::Id file = h5::create_file(path);
    h5::Id root(H5Gopen2(file.get(), "/", H5P_DEFAULT));
    set_root_attrs(root.get(), meta, shard.rank);
    h5::Id group = h5::create_group(file, shard_group_name(shard.rank));
    h5::set_attr(group.get(), "rank", std::uint64_t{shard.rank});
    h5::set_attr(group.get(), "step", meta.step);
    h5::set_attr(group.get(), "world_size", std::uint64_t{meta.world_size});
    h5::Id tensors = h5::create_group(group, "tensors");
    for (const Tensor& t : shard.tensors) {
      h5::Id ds;
      if (key != nullptr) {
        sealed.push_back(crypto::seal(*key, t.bytes, aad_for(meta.step, shard.rank, t.name)));
        const crypto::Sealed& s = sealed.back();
        ds = create_dataset(tensors, t.name, h5::raw_bytes_type(), {s.ciphertext.size()}, s.ciphertext, &pending);
        h5::set_attr(ds.get(), "encryption", std::string(crypto::kCipherName));
        h5::set_attr(ds.get(), "nonce", hex_of(s.nonce.data(), s.nonce.size()));
        h5::set_attr(ds.get(), "tag", hex_of(s.tag.data(), s.tag.size()));
      } else {
        ds = create_dataset(tensors, t.name, h5::type_for(static_cast<std::uint8_t>(t.dtype)), t.shape, t.bytes, &pending);
      }
      h5::set_attr(ds.get(), "dtype", std::string(dtype_name(t.dtype)));
      h5::set_attr(ds.get(), "shape", t.shape);
      h5::set_attr(ds.get(), "placement", std::string(t.placement == Placement::replicated ? "replicated" : "partitioned"));
      if (t.placement == Placement::partitioned) {
        const Slice slice = slice_for(t, shard.rank, meta.world_size);
        std::vector<std::uint64_t> global = t.shape;
        global[0] = slice.global_rows;
        h5::set_attr(ds.get(), "global_shape", global);
        h5::set_attr(ds.get(), "offset", slice.first_row);
      }
      tensor_bytes += t.bytes.size();
    }
    create_dataset(group, "rng_state", h5::raw_bytes_type(), {shard.rng_state.size()}, shard.rng_state, &pending);
    create_dataset(group, "data_cursor", h5::raw_bytes_type(), {shard.data_cursor.size()}, shard.data_cursor, &pending);
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
  return tensor_bytes;
}

// ---------------------------------------------------------------- reading

struct Reader::Located {
  std::string where;      // "FILE:/shard_00001/tensors/w" for messages
  std::string data_file;  // the file holding the bytes (a shard file for linked shards)
  haddr_t offset = HADDR_UNDEF;
  std::uint64_t size = 0;
  std::string xxh3;
  h5::Id dataset;  // for datasets not stored contiguously (rewritten by another tool)
};

Reader::Reader(const fs::path& file, bool drop_behind)
    : file_(file), h5_(h5::open_file(file)), drop_behind_(drop_behind) {
  const std::string where = file.string();
  const hid_t root = h5_.get();
  if (!h5::has_attr(root, "saker_format") || h5::attr_string(root, "saker_format", where) != kFormatName)
    damaged(where, "not a Saker checkpoint (no saker_format attribute)");
  meta_.format_version = h5::attr_u64(root, "format_version", where);
  if (meta_.format_version != kFormatVersion)
    throw Error(explain(where + " has format version " + std::to_string(meta_.format_version),
                        "this Saker reads version " + std::to_string(kFormatVersion), "use a matching Saker release"));
  meta_.step = h5::attr_u64(root, "step", where);
  meta_.epoch = h5::attr_u64(root, "epoch", where);
  meta_.world_size = static_cast<std::uint32_t>(h5::attr_u64(root, "world_size", where));
  if (meta_.world_size == 0 || meta_.world_size > 1u << 20) damaged(where, "bad world_size attribute");
  meta_.created_unix = h5::attr_i64(root, "created_unix", where);
  meta_.saker_version = h5::attr_string(root, "saker_version", where);
  meta_.config = h5::attr_string(root, "config", where);
  meta_.lineage = parse_lineage(h5::attr_string(root, "lineage", where));
  meta_.encryption = h5::attr_string(root, "encryption", where);
  meta_.key_id = h5::attr_string(root, "key_id", where);
}

Reader::~Reader() {
  for (auto& [name, fd] : fds_) ::close(fd);
}

std::vector<TensorInfo> Reader::tensors(std::uint32_t shard) {
  const std::string gname = shard_group_name(shard);
  const std::string where = file_.string() + ":/" + gname;
  h5::Id group = h5::open_group(h5_, gname, where);
  // A shard file left over from another save (other step or world size) must not pass.
  if (h5::attr_u64(group.get(), "rank", where) != shard || h5::attr_u64(group.get(), "step", where) != meta_.step ||
      h5::attr_u64(group.get(), "world_size", where) != meta_.world_size)
    damaged(where, "the shard belongs to another checkpoint (its rank, step or world_size attribute differs)");
  h5::Id tensors = h5::open_group(group, "tensors", where);
  std::vector<TensorInfo> out;
  for (const std::string& name : h5::children(tensors, where + "/tensors")) {
    h5::Id ds(H5Dopen2(tensors.get(), name.c_str(), H5P_DEFAULT));
    const std::string w = where + "/tensors/" + name;
    if (!ds) damaged(w, "cannot open the dataset");
    TensorInfo info;
    info.shard = shard;
    info.name = name;
    info.dtype = dtype_from_name(h5::attr_string(ds.get(), "dtype", w));
    info.shape = h5::attr_u64s(ds.get(), "shape", w);
    const std::string placement = h5::attr_string(ds.get(), "placement", w);
    if (placement != "replicated" && placement != "partitioned") damaged(w, "unknown placement '" + placement + "'");
    info.placement = placement == "replicated" ? Placement::replicated : Placement::partitioned;
    if (info.placement == Placement::partitioned) {
      info.global_shape = h5::attr_u64s(ds.get(), "global_shape", w);
      info.offset = h5::attr_u64(ds.get(), "offset", w);
      if (info.shape.empty() || info.global_shape.size() != info.shape.size())
        damaged(w, "partitioned tensor without a matching global_shape");
    }
    info.encrypted = h5::has_attr(ds.get(), "encryption");
    info.xxh3_128 = h5::attr_string(ds.get(), "xxh3_128", w);
    h5::Id space(H5Dget_space(ds.get()));
    h5::Id type(H5Dget_type(ds.get()));
    info.stored_bytes = static_cast<std::uint64_t>(H5Sget_simple_extent_npoints(space.get())) * H5Tget_size(type.get());
    std::uint64_t expect = dtype_size(info.dtype);
    for (std::uint64_t d : info.shape) expect *= d;
    if (info.stored_bytes != expect)
      damaged(w, "stores " + std::to_string(info.stored_bytes) + " bytes but its dtype and shape need " +
                     std::to_string(expect));
    out.push_back(std::move(info));
  }
  return out;
}

Reader::Located Reader::locate(std::uint32_t shard, const std::string& path_in_shard) {
  const std::string gname = shard_group_name(shard);
  Located loc;
  loc.where = file_.string() + ":/" + gname + "/" + path_in_shard;
  h5::Id group = h5::open_group(h5_, gname, loc.where);
  loc.dataset = h5::Id(H5Dopen2(group.get(), path_in_shard.c_str(), H5P_DEFAULT));
  if (!loc.dataset) damaged(loc.where, "the dataset is missing");
  loc.xxh3 = h5::attr_string(loc.dataset.get(), "xxh3_128", loc.where);
  h5::Id space(H5Dget_space(loc.dataset.get()));
  h5::Id type(H5Dget_type(loc.dataset.get()));
  loc.size = static_cast<std::uint64_t>(H5Sget_simple_extent_npoints(space.get())) * H5Tget_size(type.get());
  loc.offset = H5Dget_offset(loc.dataset.get());
  const ssize_t n = H5Fget_name(loc.dataset.get(), nullptr, 0);
  if (n > 0) {
    loc.data_file.resize(static_cast<std::size_t>(n));
    H5Fget_name(loc.dataset.get(), loc.data_file.data(), loc.data_file.size() + 1);
  }
  return loc;
}

void Reader::read_located(const Located& loc, std::byte* dst, const Progress& progress) {
  hash::Digest128 digest;
  if (loc.size > 0 && loc.offset != HADDR_UNDEF && !loc.data_file.empty()) {
    auto it = fds_.find(loc.data_file);
    if (it == fds_.end()) {
      const int fd = ::open(loc.data_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) damaged(loc.where, "cannot open " + loc.data_file + ": " + std::strerror(errno));
      it = fds_.emplace(loc.data_file, fd).first;
    }
    digest = read_pieces(it->second, loc, dst, progress);
  } else {
    // Not contiguous on disk (e.g. rewritten by h5repack): let HDF5 read it.
    std::vector<std::byte> whole;
    if (dst == nullptr) {
      whole.resize(loc.size);
      dst = whole.data();
    }
    h5::Id type(H5Dget_type(loc.dataset.get()));
    if (loc.size > 0 && H5Dread(loc.dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
      damaged(loc.where, "HDF5 could not read the data");
    digest = hash::xxh3_128(dst, loc.size);
    if (progress) progress(loc.size);
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
  Located loc = locate(info.shard, "tensors/" + info.name);
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
    const std::string gname = shard_group_name(info.shard);
    h5::Id group = h5::open_group(h5_, gname, where);
    h5::Id ds(H5Dopen2(group.get(), ("tensors/" + info.name).c_str(), H5P_DEFAULT));
    const auto nonce = crypto::from_hex(h5::attr_string(ds.get(), "nonce", where), where + " nonce");
    const auto tag = crypto::from_hex(h5::attr_string(ds.get(), "tag", where), where + " tag");
    if (nonce.size() != crypto::kNonceSize || tag.size() != crypto::kTagSize) damaged(where, "bad nonce or tag attribute");
    std::shared_ptr<std::byte[]> plain(new std::byte[std::max<std::uint64_t>(info.stored_bytes, 1)]);
    crypto::open(*key, {bytes.get(), info.stored_bytes}, nonce.data(), tag.data(),
                 aad_for(meta_.step, info.shard, info.name), {plain.get(), info.stored_bytes}, where);
    bytes = std::move(plain);
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
  Located loc = locate(shard, name);
  std::vector<std::byte> out(loc.size);
  read_located(loc, out.data(), progress);
  return out;
}

void Reader::check_blob(std::uint32_t shard, const char* name, const Progress& progress) {
  read_located(locate(shard, name), nullptr, progress);
}

std::uint64_t Reader::total_stored_bytes() {
  std::uint64_t total = 0;
  for (std::uint32_t s = 0; s < meta_.world_size; ++s) {
    for (const TensorInfo& t : tensors(s)) total += t.stored_bytes;
    for (const char* blob : {"rng_state", "data_cursor"}) total += locate(s, blob).size;
  }
  return total;
}

std::vector<fs::path> Reader::files() const {
  std::vector<fs::path> out{file_};
  for (std::uint32_t r = 1; r < meta_.world_size; ++r) out.push_back(file_.parent_path() / shard_file_name(meta_.step, r));
  return out;
}

}  // namespace saker::ckpt::format
