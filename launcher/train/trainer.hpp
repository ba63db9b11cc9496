// saker-train's training loop, independent of how gradients travel and where
// checkpoints live: both come in through the two small interfaces below (the CLI plugs
// in libsaker_comm and libsaker_ckpt). One step = one global batch of B rows split
// over the ranks; the gradient sum, the loss sum, the correct count and a "stop
// requested" flag travel in ONE allreduce, so every rank agrees on the step at which
// a preemption signal is honoured.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "launcher/train/dataset.hpp"
#include "launcher/train/optimizer.hpp"

namespace saker::train {

// Sums float buffers across the ranks, identically on every rank and in an order that
// depends only on the world size (libsaker_comm's ring guarantees both).
class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce_sum(std::span<float> data) = 0;
};

// The single-process case: nothing to reduce.
class SoloReducer final : public Reducer {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(std::span<float>) override {}
};

// Everything a resumed run needs to continue bitwise where the saved run was.
struct Snapshot {
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::vector<float> params;
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;  // named state buffers
  std::uint64_t optimizer_steps = 0;
  std::vector<std::byte> rng;
  std::vector<std::byte> cursor;
  std::string config;  // the run's configuration record (checked on resume)
  // How params (and each optimizer buffer, same layout) split into named tensors:
  // (name, shape, element count), in order. Empty: one flat tensor.
  struct Part {
    std::string name;
    std::vector<std::uint64_t> shape;
    std::size_t count = 0;
  };
  std::vector<Part> layout;
};

class SnapshotStore {
 public:
  virtual ~SnapshotStore() = default;
  virtual void save(const Snapshot& snapshot, bool emergency) = 0;  // collective; returns once committed
  // Newest snapshot whose config record is `expected_config` (others are skipped as
  // another run's, and older ones tried); collective.
  virtual std::optional<Snapshot> load_latest(const std::string& expected_config) = 0;
  virtual std::string describe() const = 0;
};

struct TrainConfig {
  std::vector<int> hidden = {64, 64};
  OptimizerConfig optimizer;
  int batch = 64;                 // global batch, split over the ranks
  std::uint64_t steps = 300;
  std::uint64_t seed = 1;
  std::uint64_t ckpt_every = 50;  // 0: only emergency checkpoints
  std::uint64_t log_every = 25;
  int step_sleep_ms = 0;          // slows steps down (demos and fault-injection tests)
  std::string preempt_marker;     // touched by rank 0 after an emergency checkpoint
  // Rank 0 appends "step=S loss=.. accuracy=.. eval_loss=.. eval_accuracy=.." here at every
  // progress line and at the last step (the eval_ values over the whole dataset); "": none.
  std::string metrics_file;
  // Who sums the gradients when that changes the summation order: "" for saker's host
  // ring, "nccl" for NCCL on the GPU. Part of the record, so a GPU run's checkpoint is
  // not resumed on the host ring (or back) as if it were the same run.
  std::string reduction;
  // The configuration record stored in checkpoints; resuming with a different
  // record is refused (it would not be the same run).
  std::string record(const Dataset& data, int world) const;
};

// Whether a checkpoint's config record continues the run `current` describes: equal but
// for the world size (a run may resume onto another number of ranks: parameters are
// replicated, and the data cursor and RNG are global).
bool same_run(const std::string& saved, const std::string& current);

struct TrainResult {
  bool preempted = false;     // stopped on a signal after an emergency checkpoint
  std::uint64_t step = 0;
  std::uint64_t resumed_from = 0;  // 0: fresh start
  double loss = 0;            // over the whole dataset, after the last step
  double accuracy = 0;
  std::string weights_hash;   // xxh3_128 hex of the parameter bytes
};

// Runs (or resumes) training. `stop` is raised by a signal handler; progress lines go
// to stdout from rank 0. Throws saker::Error on bad configuration or a foreign checkpoint.
TrainResult train(const TrainConfig& config, const Dataset& data, Reducer& reducer, SnapshotStore* store,
                  const std::atomic<int>* stop);

}  // namespace saker::train
