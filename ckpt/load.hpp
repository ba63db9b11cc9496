// Loading one checkpoint for one rank: verify every shard, then assemble this rank's state
// (replicated tensors from shard 0, partitioned tensors re-cut for the new world size).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/crypto.hpp"
#include "ckpt/parent_digest.hpp"
#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {

// A problem with the key rather than with the file: falling back to an older checkpoint
// would not help (it has the same key) and would silently lose progress.
class KeyError : public Error {
 public:
  using Error::Error;
};

// Resolves ReadCache::automatic for a load by `world_size` ranks (reads LOCAL_WORLD_SIZE).
bool drop_read_cache(ReadCache mode, std::uint32_t world_size);

// The one judgement: verify() and every load run this. It checks every manifest, every
// shard's binding and every byte's checksum; with `key` also the key id, the manifests'
// tags and each tensor's decryption. check_only (verify without a key): the bytes are
// hashed, not kept, and an encrypted checkpoint is judged on its checksums alone.
// main_digest: when the load succeeds, set to the main file's SHA-256 in progress: hashed
// on a thread after the load returns, through the descriptor the load read it from
// (ckpt/parent_digest.hpp), so the load never waits for it.
LoadReport load_checkpoint(const std::filesystem::path& file, std::uint32_t rank, std::uint32_t world_size,
                           const crypto::Key* key, bool drop_behind = false, bool check_only = false,
                           const Progress& progress = {}, std::unique_ptr<ParentDigest>* main_digest = nullptr);

}  // namespace saker::ckpt
