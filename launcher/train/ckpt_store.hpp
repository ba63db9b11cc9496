// The trainer's SnapshotStore over libsaker_ckpt: every snapshot is one committed,
// checksummed HDF5 checkpoint (parameters and optimizer state as replicated tensors,
// RNG and data cursor as the state's opaque bytes, the run's configuration record and
// dataset lineage), and resuming loads the newest one that verifies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/train/trainer.hpp"

namespace saker::ckpt {
class Checkpointer;
class DestinationGuard;
struct DatasetVersion;
}  // namespace saker::ckpt

namespace saker::train {

struct CkptStoreOptions {
  std::string dir;
  unsigned keep_last = 3;
  std::string lineage;   // "name@version,..." (may be empty)
  std::string key_file;  // AES-256 key, mode 0600; empty: unencrypted
  std::string mode = "0600";  // of the files: 0600, or 0640 by explicit choice (ckpt::parse_access)
  // The residency/encryption rule (ckpt::PolicyGuard); null: none. Checked once here,
  // before the directory is created, and again by every save.
  std::shared_ptr<const ckpt::DestinationGuard> guard;
  // When every checkpoint in `dir` is damaged: false refuses (AllDamaged), true starts
  // over from step 0 with a warning naming each damaged file.
  bool allow_fresh_start = false;
};

// Every checkpoint in the directory is damaged and starting over was not allowed
// (saker-train exits 79 on it). The message names each file and why.
class AllDamaged : public Error {
 public:
  using Error::Error;
};

class CkptStore final : public SnapshotStore {
 public:
  // `reducer` doubles as the shard barrier, so every rank knows a save committed.
  // Throws ckpt::DestinationRefused when the guard refuses the directory.
  CkptStore(const CkptStoreOptions& options, Reducer& reducer);
  ~CkptStore() override;
  void save(const Snapshot& snapshot, bool emergency) override;
  std::optional<Snapshot> load_latest(const std::string& expected_config) override;
  std::string describe() const override { return dir_; }

 private:
  // One run id for every rank: the resumed checkpoint's, else rank 0's random one.
  void ensure_run_id();

  std::string dir_;
  bool allow_fresh_start_ = false;
  std::string run_id_;
  Reducer& reducer_;
  std::vector<ckpt::DatasetVersion> lineage_;
  std::unique_ptr<ckpt::Checkpointer> ck_;
};

}  // namespace saker::train
