// The trainer's SnapshotStore over libsaker_ckpt: every snapshot is one committed,
// checksummed HDF5 checkpoint (parameters and optimizer state as replicated tensors,
// RNG and data cursor as the state's opaque bytes, the run's configuration record and
// dataset lineage), and resuming loads the newest one that verifies.
#pragma once

#include <memory>
#include <string>

#include "launcher/train/trainer.hpp"

namespace saker::ckpt { class Checkpointer; }

namespace saker::train {

class CkptStore final : public SnapshotStore {
 public:
  // `reducer` doubles as the shard barrier, so every rank knows a save committed.
  // `lineage` is "name@version,..." (may be empty).
  CkptStore(const std::string& dir, unsigned keep_last, Reducer& reducer, std::string lineage);
  ~CkptStore() override;
  void save(const Snapshot& snapshot, bool emergency) override;
  std::optional<Snapshot> load_latest() override;
  std::string describe() const override { return dir_; }

 private:
  std::string dir_;
  Reducer& reducer_;
  std::string lineage_;
  std::unique_ptr<ckpt::Checkpointer> ck_;
};

}  // namespace saker::train
