// The integrity record of one checkpoint file (format 3, saker-ckpt(5); format 2 is read).
//
// Why it lives in the HDF5 user block and is read by us, not by HDF5: HDF5 checksums
// only part of its own metadata (the global heap holding variable-length strings has
// none), and a flipped byte there made HDF5 crash or spin. So every file starts with a
// user block that HDF5 skips and we parse ourselves, with bounded reads:
//
//   [0, 16)   magic "saker-ckpt\0v3\0\0\0" (format 2: "v2")
//   [16, 24)  user block size U (little endian; a power of two, 4 KiB..64 MiB)
//   [24, 32)  manifest length L
//   [32, 48)  XXH3-128 of header bytes [48, 80) followed by the manifest bytes (format 2:
//             of the manifest bytes alone, so a changed tag or nonce passed a keyless check)
//   [48, 64)  AES-256-GCM tag over the manifest (encrypted checkpoints; else zeros)
//   [64, 76)  its nonce (else zeros)
//   [76, 80)  zeros
//   [80, 80+L) the manifest: text lines, strings percent-escaped
//
// The manifest records the run, step, epoch, world size, rank, lineage, config, format,
// encryption, key id, every tensor and blob (name, dtype, shape, placement, file offset,
// byte length, checksum, nonce and tag), the file's size, and one checksum over every
// byte of the file outside the user block and the data regions (HDF5's metadata). The
// main file also lists each shard file with the checksum of that shard's manifest. A
// reader checks the manifest's checksum, then that hash of the rest of the file, before
// it trusts anything; loading never hands the file to HDF5 at all.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/crypto.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt::manifest {

// The manifest's text encoding: a string as one space-free token (percent-escapes, "%" for
// the empty string), and back. unescape throws saker::Error naming `where` (damaged).
std::string escape(const std::string& s);
std::string unescape(const std::string& s, const std::string& where);

inline constexpr std::uint64_t kFormatVersion = 3;  // written; 2 is still read
inline constexpr std::size_t kHeaderBytes = 80;
inline constexpr std::uint64_t kMinUserBlock = 4096;
inline constexpr std::uint64_t kMaxUserBlock = std::uint64_t{64} << 20;

// Bytes stored somewhere in the file: a tensor or the rng_state/data_cursor blob.
struct Entry {
  std::string name;
  DType dtype = DType::u8;
  std::vector<std::uint64_t> shape;
  Placement placement = Placement::replicated;
  std::vector<std::uint64_t> global_shape;  // partitioned only
  std::uint64_t first_row = 0;              // partitioned only
  std::uint64_t file_offset = 0;            // absolute offset in the file; 0 when bytes == 0
  std::uint64_t bytes = 0;                  // stored bytes (ciphertext when encrypted)
  std::string xxh3;                         // of the stored bytes, 32 hex digits
  bool encrypted = false;
  std::string nonce, tag;                   // hex, encrypted only
};

struct ShardRef {
  std::uint32_t rank = 0;
  std::string file;           // file name, in the main file's directory
  std::string manifest_xxh3;  // checksum of that shard's manifest bytes
};

struct Manifest {
  std::uint64_t format_version = kFormatVersion;
  std::string run_id;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint32_t world_size = 1;
  std::uint32_t rank = 0;  // whose file this is: 0 for the main file
  std::int64_t created_unix = 0;
  std::string saker_version;
  std::string config;
  std::string lineage;  // format_lineage()
  std::string encryption = "none";
  std::string key_id;
  std::uint64_t user_block = kMinUserBlock;
  std::uint64_t file_size = 0;
  std::string meta_xxh3;  // every byte outside the user block and the entries' bytes
  // The main file's provenance record (ckpt/provenance.hpp), "" when none: an optional
  // line after meta_xxh3, so the header checksum and GCM tag cover it.
  std::string provenance;
  std::vector<Entry> tensors;
  Entry rng_state, data_cursor;
  std::vector<ShardRef> shards;  // main file only: ranks 1..world_size-1
};

std::string encode(const Manifest& m);
// Throws saker::Error naming `where` on anything malformed (bounded: never loops on input).
Manifest decode(const std::string& text, const std::string& where);

// The user block a file needs for a manifest of about `estimate` bytes.
std::uint64_t user_block_for(std::uint64_t estimate);
// A generous estimate of the encoded size of a manifest with these contents.
std::uint64_t estimate(const Manifest& m, std::size_t shard_refs);

// AAD binding an encrypted tensor to its run, step, shard and name.
std::string tensor_aad(const std::string& run_id, std::uint64_t step, std::uint32_t shard, const std::string& name);

// After HDF5 closed the file: computes file_size and meta_xxh3, writes the user block
// (with the GCM tag when `key`) and returns the manifest's checksum. Throws when the
// manifest does not fit the user block HDF5 reserved.
std::string seal(const std::filesystem::path& file, Manifest& m, const crypto::Key* key);

struct Opened {
  Manifest manifest;
  std::string text;  // the manifest as stored
  std::string manifest_xxh3;
  std::array<unsigned char, crypto::kTagSize> tag{};
  std::array<unsigned char, crypto::kNonceSize> nonce{};
};
// Reads and checks one file: header, manifest checksum, size and the hash of every byte
// outside the data regions. Throws saker::Error ("damaged") naming the file and why.
// Reads at most the user block plus the file's metadata bytes, in bounded pieces.
Opened open_checked(const std::filesystem::path& file);
// With a key: the key id must match, then the manifest's GCM tag. Throws KeyError on
// another key, saker::Error on a bad tag.
void authenticate(const Opened& o, const crypto::Key& key, const std::string& where);

}  // namespace saker::ckpt::manifest
