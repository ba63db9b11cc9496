// The on-disk format (saker-ckpt(5)): how one file is laid out and how it is read back.
//
// Writing goes through HDF5 (h5py and h5dump see ordinary groups, datasets and
// attributes); tensor bytes are stored in contiguous, unfiltered datasets whose space is
// allocated up front, and written by plain pwrite at the dataset's file offset. The
// manifest (ckpt/manifest.hpp) in the user block then records and checksums everything.
// Reading never goes through HDF5: the Reader checks the manifests of the main file and
// every shard file, then preads each piece at the offset the manifest gives.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/crypto.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/hash_behind.hpp"
#include "ckpt/manifest.hpp"
#include "common/hash.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt::format {

inline constexpr const char* kFormatName = "saker-ckpt";
inline constexpr std::uint64_t kFormatVersion = manifest::kFormatVersion;

std::string main_file_name(std::uint64_t step);                        // ckpt-000000000100.h5
std::string shard_file_name(std::uint64_t step, std::uint32_t rank);   // ckpt-000000000100.shard-00001.h5
std::string shard_group_name(std::uint32_t rank);                       // shard_00001
// Parses a main file name; false for shard files, temporaries and anything else.
bool parse_main_file_name(const std::string& name, std::uint64_t* step);
bool parse_shard_file_name(const std::string& name, std::uint64_t* step, std::uint32_t* rank);

struct FileMeta {
  std::string run_id;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint32_t world_size = 1;
  std::int64_t created_unix = 0;
  std::string saker_version;
  std::uint64_t format_version = kFormatVersion;
  std::string config;
  std::vector<DatasetVersion> lineage;
  std::string encryption = "none";
  std::string key_id;
  std::string provenance;  // the main file's provenance record (ckpt/provenance.hpp); shards: ""
};

struct ShardOut {
  std::uint32_t rank = 0;
  std::vector<Tensor> tensors;
  std::span<const std::byte> rng_state;
  std::span<const std::byte> data_cursor;
};

// Writes a complete HDF5 file at `path` (not yet published, manifest not yet sealed):
// root attributes, the group of `shard`, and external links to the groups of `linked`
// (rank, file name). Returns its manifest, to be completed (shard refs) and sealed
// (manifest::seal). `key` encrypts tensors (not RNG/cursor state) when non-null.
manifest::Manifest write_file(const std::filesystem::path& path, const FileMeta& meta, const ShardOut& shard,
                              const std::vector<std::pair<std::uint32_t, std::string>>& linked, const crypto::Key* key);
std::uint64_t tensor_bytes(const manifest::Manifest& m);  // plaintext tensor bytes a manifest describes

// Opens a shard file for the main file's manifest: checked, bound to the same run, step,
// world size and encryption, and of the rank its name says. Throws naming the file.
manifest::Opened open_shard(const std::filesystem::path& file, const manifest::Manifest& main, std::uint32_t rank);

using Progress = std::function<void(std::uint64_t bytes)>;  // bytes just read

class Reader {
 public:
  // Checks the manifests of the main file and of every shard file (checksums, the hash
  // of everything outside the data, binding to run, step, world size, rank and file
  // name); with `key` also the key id and each manifest's authentication tag.
  // drop_behind: each piece's page-cache pages are dropped once it is read and hashed
  // (see ReadCache in saker/ckpt.hpp for when that is right). Throws saker::Error.
  explicit Reader(const std::filesystem::path& file, bool drop_behind = false, const crypto::Key* key = nullptr);
  ~Reader();
  const FileMeta& meta() const { return meta_; }
  const std::filesystem::path& file() const { return file_; }

  std::vector<TensorInfo> tensors(std::uint32_t shard);
  // Reads the stored bytes (ciphertext when encrypted) of one tensor into `dst`
  // (info.stored_bytes long) and checks its xxh3-128; throws naming the tensor on mismatch.
  // dst == nullptr: the bytes are checked only, through a reused piece-sized buffer.
  void read_stored(const TensorInfo& info, std::byte* dst, const Progress& progress = {});
  // Reads and checks the stored bytes without keeping them (no tensor-sized allocation).
  void check_stored(const TensorInfo& info, const Progress& progress = {});
  // Reads, checks and (with `key`) decrypts one tensor into an owned Tensor.
  Tensor read_tensor(const TensorInfo& info, const crypto::Key* key, const Progress& progress = {});
  std::vector<std::byte> read_blob(std::uint32_t shard, const char* name, const Progress& progress = {});
  void check_blob(std::uint32_t shard, const char* name, const Progress& progress = {});
  // Total stored bytes of every shard's tensors and blobs (for progress).
  std::uint64_t total_stored_bytes();
  // The files this checkpoint consists of (main file first).
  std::vector<std::filesystem::path> files() const;
  // The descriptor the main file's bytes are read through (opened now if no read has
  // opened it yet; the Reader keeps it): its SHA-256 is taken through it (ckpt/parent_digest.hpp).
  // Throws naming the file when it cannot be opened.
  int main_file_fd();

 private:
  struct Located;
  Located locate(std::uint32_t shard, const manifest::Entry& entry);
  const manifest::Entry& entry(std::uint32_t shard, const std::string& name);
  void read_located(const Located& loc, std::byte* dst, const Progress& progress);
  hash::Digest128 read_pieces(int fd, const Located& loc, std::byte* dst, const Progress& progress);
  void populate(std::byte* p, std::size_t size);  // on the helper thread

  std::filesystem::path file_;
  std::vector<manifest::Opened> shards_;  // [0] is the main file
  std::vector<std::filesystem::path> paths_;
  FileMeta meta_;
  std::map<std::string, int> fds_;  // data files opened for pread
  bool drop_behind_ = false;
  std::vector<std::byte> scratch_;      // two pieces, for bytes that are checked but not kept
  std::unique_ptr<HashBehind> hasher_;  // started by the first read of more than one piece
  std::atomic<bool> populate_{true};    // false once the kernel lacks MADV_POPULATE_WRITE
};

}  // namespace saker::ckpt::format
