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

// The reading half of the checkpoint format (format.cpp writes): a main file and its
// shards opened, bound to each other and checked; tensors read with their checksums.
namespace saker::ckpt::format {
namespace fs = std::filesystem;

namespace {

// Pieces small enough to stay in cache between the read and the checksum.
constexpr std::size_t kPiece = std::size_t{8} << 20;

[[noreturn]] void damaged(const std::string& where, const std::string& why) {
  throw Error(explain(where, why, "this checkpoint is damaged; load an older one (saker-ckpt verify lists the intact ones)"));
}

}  // namespace

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

int Reader::main_file_fd() {
  const std::string main = paths_[0].string();
  auto it = fds_.find(main);
  if (it == fds_.end()) {
    const int fd = ::open(main.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) damaged(main, std::string("cannot open for reading: ") + std::strerror(errno));
    it = fds_.emplace(main, fd).first;
  }
  return it->second;
}

}  // namespace saker::ckpt::format
