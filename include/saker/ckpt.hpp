// libsaker_ckpt: atomic, checksummed, optionally encrypted HDF5 checkpoints.
//
// One checkpoint = one committed file `ckpt-<step>.h5` in a directory (plus, for
// world_size > 1, one `ckpt-<step>.shard-<rank>.h5` per other rank, reached from the
// main file through HDF5 external links). The format is documented in saker-ckpt(5);
// h5py and h5dump read it without Saker.
//
// Typical use (one process per rank):
//   saker::ckpt::Options opt;  opt.keep_last = 3;  opt.keep_every = 1000;
//   saker::ckpt::Checkpointer ck("/scratch/run1/ckpt", opt);
//   if (auto r = ck.load_latest(rank, world)) resume_from(r->state);
//   ...
//   ck.save_async(state);   // stalls only for a memcpy snapshot; at most one save in flight
//   ck.save(state);         // synchronous (e.g. on a preemption signal)
//
// Every error is a saker::Error whose message names the file, the reason and the fix.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saker/error.hpp"

namespace saker::ckpt {

// ---------------------------------------------------------------- tensors and state

enum class DType : std::uint8_t { f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean };
inline constexpr DType kAllDTypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64, DType::i8,
                                       DType::i16, DType::i32,  DType::i64, DType::u8,  DType::u16,
                                       DType::u32, DType::u64,  DType::boolean};

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);           // "float32", "bfloat16", "bool", ...
DType dtype_from_name(std::string_view name);       // throws saker::Error on unknown names

// Replicated: identical on every rank, written once (by rank 0), given whole to every
// rank on load. Partitioned: each rank holds an even slice along dimension 0; on load
// with another world size the slices are re-cut evenly (ranks [r*n/W, (r+1)*n/W)).
enum class Placement : std::uint8_t { replicated, partitioned };

struct Tensor {
  std::string name;  // [A-Za-z0-9_.:-]+, unique within a state
  DType dtype = DType::f32;
  std::vector<std::uint64_t> shape;  // this rank's shape; {} is a scalar
  Placement placement = Placement::replicated;
  // Partitioned only: rows of the whole tensor along dimension 0; 0 means shape[0] * world
  // size. Rank r must hold rows [r*n/W, (r+1)*n/W).
  std::uint64_t global_rows = 0;
  // Row-major, little-endian bytes: dtype_size(dtype) * product(shape). Borrowed from the
  // caller (must stay valid until save() returns, or until save_async() returns) or
  // owned through `storage`, which keeps whatever holds the bytes alive (tensors returned
  // by load, Tensor::owning).
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> storage;

  static Tensor view(std::string name, DType dtype, std::vector<std::uint64_t> shape,
                     std::span<const std::byte> bytes, Placement placement = Placement::replicated);
  static Tensor owning(std::string name, DType dtype, std::vector<std::uint64_t> shape,
                       std::vector<std::byte> bytes, Placement placement = Placement::replicated);
  template <class T>
  static Tensor view_of(std::string name, DType dtype, std::vector<std::uint64_t> shape,
                        std::span<const T> values, Placement placement = Placement::replicated) {
    return view(std::move(name), dtype, std::move(shape), std::as_bytes(values), placement);
  }

  std::uint64_t element_count() const;  // product(shape); 1 for a scalar
  // Typed view of the bytes; throws when sizeof(T) does not match the dtype size.
  template <class T>
  std::span<const T> as() const {
    check_element_size(sizeof(T));
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

 private:
  void check_element_size(std::size_t size) const;
};

struct DatasetVersion {
  std::string name;
  std::string version;  // empty: unpinned
  std::string str() const { return version.empty() ? name : name + "@" + version; }
  bool operator==(const DatasetVersion&) const = default;
};
// "a@v1,b" <-> list. Throws saker::Error on malformed text.
std::vector<DatasetVersion> parse_lineage(std::string_view text);
std::string format_lineage(const std::vector<DatasetVersion>& lineage);

struct State {
  // Which run this state belongs to: every shard of a checkpoint carries it, and encrypted
  // tensors are bound to it. Empty: Options::run_id, else one derived from the directory.
  // Resuming gives back the run id the checkpoint was written with.
  std::string run_id;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint32_t world_size = 1;
  std::uint32_t rank = 0;
  std::string config;                   // free-form config / hyperparameters record (JSON, YAML, text)
  std::vector<DatasetVersion> lineage;  // what the model was trained on (provenance, residency)
  std::vector<Tensor> tensors;
  std::vector<std::byte> rng_state;    // this rank's RNG state, opaque
  std::vector<std::byte> data_cursor;  // this rank's data-loader cursor, opaque

  const Tensor* find(std::string_view name) const;  // nullptr when absent
};

// ---------------------------------------------------------------- hooks the caller provides

// Where a checkpoint may be written (the residency rule) and whether it must be encrypted.
// ckpt/policy_guard.hpp adapts the policy engine to this interface; tests use doubles.
class DestinationGuard {
 public:
  virtual ~DestinationGuard() = default;
  // Throws saker::Error (naming the dataset, the zone and the fix) when a model trained on
  // `lineage` must not be written under `dir`. Any exception refuses the save (fail closed).
  virtual void check(const std::filesystem::path& dir, const std::vector<DatasetVersion>& lineage) const = 0;
  // True when the lineage holds data that may only be stored encrypted.
  virtual bool require_encryption(const std::vector<DatasetVersion>& lineage) const = 0;
  // True when the lineage holds restricted data, whose checkpoints only their owner should
  // read (saker-ckpt verify warns about group- or world-readable ones).
  virtual bool restricted(const std::vector<DatasetVersion>& lineage) const { return require_encryption(lineage); }
};

// A save the guard refuses: retrying will not help until the destination, the key or the
// policy changes (saker-train exits 78 on it).
class DestinationRefused : public saker::Error {
 public:
  using saker::Error::Error;
};

// The guard's two rules for saving a model trained on `lineage` into `dir`, without
// touching the filesystem: the residency rule, then encryption (required and `encrypted`
// false: refused). Throws DestinationRefused naming the step (when given), the directory,
// the reason and the fix. Checkpointer runs it before every save; callers run it once at
// start-up (no step) so a refused destination costs no training time.
void check_destination(const DestinationGuard& guard, const std::filesystem::path& dir,
                       const std::vector<DatasetVersion>& lineage, bool encrypted,
                       std::optional<std::uint64_t> step = std::nullopt);

// Sharded saves: every rank calls the barrier after its own shard file is durable (ok) or
// failed (!ok); it must return true on every rank only when every rank passed true. Rank 0
// commits the checkpoint only after it returns true. For save_async() it is called on the
// writer thread, so it must not share a non-thread-safe communicator with training. When
// empty and world_size > 1, rank 0 instead waits for the other ranks' committed shard files
// to appear in the directory (Options::shard_timeout, naming the missing ranks).
using ShardBarrier = std::function<bool(bool my_shard_ok)>;

// What loading does with the page cache. A checkpoint is read once, so by default its
// pages are dropped as soon as each piece is read and checked: the job's own data stays
// cached, and each piece reuses the pages the previous one freed (on VMs that report free
// memory to the hypervisor, fresh page-cache pages cost 3x the read itself). But when
// several processes on one node read the same files (every rank reads every shard to
// verify it), dropping would make each of them read the files from disk again.
enum class ReadCache : std::uint8_t {
  automatic,  // drop when this process is its job's only rank on this node (world size 1,
              // or LOCAL_WORLD_SIZE=1 as set by saker-run and torchrun), keep otherwise
  keep,
  drop,
};

// Who may read what a Checkpointer writes. owner, the default: files (temporary ones,
// shards, manifests and the "latest" pointer included) 0600 and the directories it creates
// 0700. group, only by explicit choice (SAKER_CKPT_MODE=0640, saker-train --ckpt-mode,
// saker.torch's mode=): 0640 and 0750. The umask cannot widen either, nor narrow it.
enum class Access : std::uint8_t { owner, group };
// "0600" (or "") -> owner, "0640" -> group; throws saker::Error naming `mode` otherwise.
Access parse_access(std::string_view mode);
unsigned file_mode(Access a);       // 0600 or 0640
unsigned directory_mode(Access a);  // 0700 or 0750

struct Options {
  std::string run_id;  // for states with an empty run_id (see State::run_id)
  std::uint32_t keep_last = 3;   // keep the newest K checkpoints (0: keep all)
  std::uint64_t keep_every = 0;  // also keep every checkpoint whose step % M == 0 (0: none)
  std::filesystem::path key_file;  // AES-256 key (32 raw bytes or 64 hex digits), mode 0600; empty: no encryption
  std::shared_ptr<const DestinationGuard> guard;  // null: no residency rule
  ShardBarrier barrier;
  std::chrono::seconds shard_timeout{600};
  // Temporary files left by dead writers on this host are removed at once; those from
  // other hosts (shared filesystems) once older than this.
  std::chrono::seconds stale_temp_age{3600};
  ReadCache read_cache = ReadCache::automatic;
  Access access = Access::owner;
};

// ---------------------------------------------------------------- saving and loading

struct SaveReport {
  std::uint64_t step = 0;
  std::filesystem::path file;  // this rank's file
  std::uint64_t bytes = 0;     // tensor bytes this rank wrote
  double stall_s = 0;          // time the caller was blocked (waiting for the previous save + snapshot)
  double write_s = 0;          // time to write, fsync and commit
  bool committed = false;      // rank 0: the checkpoint is committed and "latest" points at it
};

struct SaveJob;  // private to the library

class SaveHandle {
 public:
  SaveHandle() = default;
  explicit SaveHandle(std::shared_ptr<SaveJob> job) : job_(std::move(job)) {}
  bool valid() const { return job_ != nullptr; }
  bool done() const;
  SaveReport wait() const;  // rethrows the writer's error
  double stall_s() const;   // known as soon as save_async() returns

 private:
  std::shared_ptr<SaveJob> job_;
};

struct LoadReport {
  State state;                  // for the requested rank and world size
  std::filesystem::path file;   // the checkpoint that was loaded
  std::uint32_t saved_world_size = 1;
  bool resharded = false;       // saved with another world size (rng/cursor then come from rank 0)
  std::vector<std::string> rejected;  // newer checkpoints skipped: "FILE: why"
};

class Checkpointer {
 public:
  // Creates `dir` if needed and removes stale temporary files. Throws saker::Error.
  explicit Checkpointer(std::filesystem::path dir, Options options = {});
  ~Checkpointer();  // waits for an in-flight save (errors are logged)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  SaveReport save(const State& state);
  // Waits for the previous save, snapshots the state into host memory and returns; a
  // background thread writes it. The stall is logged and in the handle.
  SaveHandle save_async(const State& state);
  // Waits for the in-flight save, if any; rethrows its error.
  std::optional<SaveReport> wait();

  // Newest checkpoint that verifies (every shard's checksums), for `rank` of `world_size`.
  // Bad ones are skipped, logged and listed in LoadReport::rejected. nullopt: none usable.
  std::optional<LoadReport> load_latest(std::uint32_t rank = 0, std::uint32_t world_size = 1);
  // The same, skipping (and listing in `rejected`) intact checkpoints `accept` refuses by
  // throwing saker::Error, e.g. another run's (its config record differs).
  using Accept = std::function<void(const LoadReport&)>;
  std::optional<LoadReport> load_latest(std::uint32_t rank, std::uint32_t world_size, const Accept& accept);
  // What the last load_latest() skipped, "FILE: why", newest first (also when it found
  // nothing: then every committed checkpoint is listed, and a caller must not start over
  // silently).
  const std::vector<std::string>& last_rejected() const;
  LoadReport load(const std::filesystem::path& file, std::uint32_t rank = 0, std::uint32_t world_size = 1);
  // The SHA-256 of each checkpoint this Checkpointer loaded, as its next save names them
  // (provenance parents; rank 0 only). A load returns before its digest is taken (a thread
  // hashes the file afterwards); this waits for those still in progress, as a save does.
  std::vector<std::string> parent_digests();

  // Applies the retention rule now (saves do it after each commit). Returns files removed.
  std::vector<std::filesystem::path> prune();

 private:
  void check_destination(const State& state) const;

  std::filesystem::path dir_;
  Options options_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- inspection (saker-ckpt)

struct TensorInfo {
  std::uint32_t shard = 0;
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::uint64_t> shape;
  Placement placement = Placement::replicated;
  std::vector<std::uint64_t> global_shape;  // partitioned: the whole tensor
  std::uint64_t offset = 0;                 // partitioned: first row along dimension 0
  std::uint64_t stored_bytes = 0;
  std::string xxh3_128;  // hex, of the stored (possibly encrypted) bytes
  bool encrypted = false;
};

struct CheckpointInfo {
  std::filesystem::path file;
  std::string run_id;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint32_t world_size = 1;
  std::int64_t created_unix = 0;
  std::string saker_version;
  std::uint32_t format_version = 0;
  std::string config;
  std::vector<DatasetVersion> lineage;
  std::string encryption;  // "none" or "aes-256-gcm"
  std::string key_id;      // fingerprint of the key (never the key)
  std::uint64_t bytes = 0;  // all files of the checkpoint on disk
  std::vector<TensorInfo> tensors;
  std::string provenance;  // the provenance record (saker-ckpt(5)), "" in older checkpoints
};

// Reads metadata only (no checksums). Throws saker::Error when the file is not a readable
// Saker checkpoint.
CheckpointInfo describe(const std::filesystem::path& file);

struct Verdict {
  std::filesystem::path file;
  std::uint64_t step = 0;  // from the file name when the file is unreadable
  bool ok = false;
  std::string problem;  // empty when ok
};
// Progress: bytes checked so far and in total (for long verifications).
using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;
// The judgement every load makes (one code path): every manifest, shard binding and
// checksum; with `key_file` also the key id, the manifests' authentication tags and every
// tensor's decryption (what an encrypted resume checks). Never throws for a damaged file.
Verdict verify(const std::filesystem::path& file, const Progress& progress = {},
               const std::filesystem::path& key_file = {});

// saker-ckpt verify's warning: when `guard` calls the lineage of the checkpoint `main_file`
// restricted, one line for each of its files (main and shards) that group or others may
// read, naming the file, its mode and the fix; empty otherwise. Throws saker::Error when
// the main file is not a readable checkpoint.
std::vector<std::string> exposure_warnings(const DestinationGuard& guard, const std::filesystem::path& main_file);

// The step a main file's name says (ckpt-<step>.h5); 0 for any other name.
std::uint64_t step_in_name(const std::filesystem::path& main_file);
// Committed checkpoints in `dir` (main files only), oldest step first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);
// The retention rule. Only checkpoints that verify count toward keep_last; the newest
// verified one is never removed, nor damaged ones newer than it (nothing at all is
// removed while none verifies); damaged ones older than it are removed.
struct PruneOptions {
  std::uint32_t keep_last = 3;   // 0: keep all
  std::uint64_t keep_every = 0;  // also keep verified steps that are multiples of M
  bool dry_run = false;          // report what would be removed, remove nothing
  bool full_verify = false;      // read every byte (else: manifests and metadata only)
  // With full_verify: called before each checkpoint is read (index of count), returns the
  // Progress that file's verification reports to (empty: none). For progress lines.
  std::function<Progress(std::size_t index, std::size_t count, const std::filesystem::path& main)> progress;
};
struct PruneReport {
  std::vector<std::filesystem::path> removed;  // or would be, with dry_run
  std::vector<std::filesystem::path> kept;     // main files
  std::vector<std::string> damaged;            // "FILE: why"
};
PruneReport prune(const std::filesystem::path& dir, const PruneOptions& options);
// The same with manifest-level checks; returns the files removed.
std::vector<std::filesystem::path> prune(const std::filesystem::path& dir, std::uint32_t keep_last,
                                         std::uint64_t keep_every);

}  // namespace saker::ckpt
