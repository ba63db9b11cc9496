// saker-train's training loop, independent of how gradients travel and where
// checkpoints live: both come in through the two small interfaces below (the CLI plugs
// in libsaker_comm and libsaker_ckpt). One step = one global batch of B rows split
// over L logical workers (--logical-ranks, by default the first world size), which the
// ranks compute in contiguous blocks (comm::LogicalMap); each worker's gradient, loss
// sum and correct count, with a "stop requested" and a "resize requested" flag, travel
// in ONE canonical-order sum (comm/ordered_reduce.hpp), so that the weights are the
// same bits whatever the world size, the transport, and any resize on the way, and
// every rank agrees on the step at which a preemption or a resize is honoured.
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

// Sums float buffers across the ranks.
class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Identical on every rank, in an order that may depend on the world size and the
  // transport (checkpoint barriers, counts).
  virtual void allreduce_sum(std::span<float> data) = 0;
  // The canonical sum of `logical` workers' contributions (comm/ordered_reduce.hpp):
  // parts are this rank's workers' (comm::LogicalMap(logical, size()).count(rank()) of
  // them, in logical order, `count` floats each); out receives the sum on every rank,
  // the same bits whatever size() and the transport. Collective.
  virtual void sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) = 0;
};

// The single-process case: nothing to reduce across ranks; the logical workers are
// still summed in the canonical order, so one process ends with the many's bits.
class SoloReducer final : public Reducer {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(std::span<float>) override {}
  void sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) override;
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

class AutoInterval;

struct TrainConfig {
  std::vector<int> hidden = {64, 64};
  OptimizerConfig optimizer;
  int batch = 64;                 // global batch, split over the logical workers
  // Logical workers (--logical-ranks): 0 takes the resumed checkpoint's, else the world
  // size. A resume with another explicit value is refused (another run).
  int logical_ranks = 0;
  std::uint64_t steps = 300;
  std::uint64_t seed = 1;
  std::uint64_t ckpt_every = 50;  // 0: only emergency checkpoints
  // --ckpt-every auto: decides the periodic checkpoints instead of ckpt_every (goodput.hpp).
  AutoInterval* auto_interval = nullptr;
  std::uint64_t log_every = 25;
  int step_sleep_ms = 0;          // slows steps down (demos and fault-injection tests)
  std::string preempt_marker;     // touched by rank 0 after an emergency checkpoint
  // saker-run's resize contract (SAKER_RESIZE_NOTICE): when this file exists and does not
  // name the current world size, every rank stops at the same step boundary, saves a
  // checkpoint, rank 0 touches preempt_marker, and train() returns with resized set
  // (saker-train exits 75). "": none.
  std::string resize_notice;
  // Rank 0 appends "step=S loss=.. accuracy=.. eval_loss=.. eval_accuracy=.." here at every
  // progress line and at the last step (the eval_ values over the whole dataset); "": none.
  std::string metrics_file;
  // The configuration record stored in checkpoints, with the logical worker count L;
  // resuming with a different record is refused (it would not be the same run).
  std::string record(const Dataset& data, int world, int logical) const;
};

// Whether a checkpoint's config record continues the run `current` describes: equal but
// for the world size and the logical worker count (a run may resume onto another number
// of ranks: parameters are replicated, the data cursor is global and each logical
// worker's rows follow from it; the logical count is checked apart, see logical_ranks_of).
bool same_run(const std::string& saved, const std::string& current);
// The logical worker count a config record was written with: its "logical_ranks", else
// (records from before --logical-ranks) its "world_size"; 0 when it has neither.
int logical_ranks_of(const std::string& record);
// The world size a resize notice file asks for: -1 when the file does not exist, 0 when
// it exists but does not hold a number (still a notice).
int resize_notice_size(const std::string& path);

struct TrainResult {
  bool preempted = false;     // stopped on a signal or a resize notice, after a checkpoint
  bool resized = false;       // ... and it was the resize notice
  std::uint64_t step = 0;
  std::uint64_t resumed_from = 0;  // 0: fresh start
  double loss = 0;            // over the whole dataset, after the last step
  double accuracy = 0;
  std::string weights_hash;   // xxh3_128 hex of the parameter bytes (also when stopped)
  int logical_ranks = 0;      // L the run used
};

// Runs (or resumes) training. `stop` is raised by a signal handler; progress lines go
// to stdout from rank 0. Throws saker::Error on bad configuration or a foreign checkpoint.
TrainResult train(const TrainConfig& config, const Dataset& data, Reducer& reducer, SnapshotStore* store,
                  const std::atomic<int>* stop);

}  // namespace saker::train
