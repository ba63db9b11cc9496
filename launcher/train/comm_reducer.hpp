// The trainer's Reducer over saker's host ring: one f32 sum-allreduce per step through
// a libsaker_comm communicator (reducer_choice.hpp bootstraps it from saker-run's
// environment: PMI2 under srun, the MASTER_ADDR/MASTER_PORT store under
// saker-run --local).
#pragma once

#include <memory>

#include "launcher/train/trainer.hpp"

namespace saker::comm {
class Communicator;
class OrderedReduce;
}  // namespace saker::comm

namespace saker::train {

// Reducer::sum_logical over a communicator: comm::OrderedReduce, made on first use for
// the run's L (every rank calls it with the same L at the same step).
class LogicalSum {
 public:
  LogicalSum();
  ~LogicalSum();
  void sum(comm::Communicator& comm, int logical, std::span<float* const> parts, std::size_t count, float* out);

 private:
  std::unique_ptr<comm::OrderedReduce> reduce_;
};

class CommReducer final : public Reducer {
 public:
  explicit CommReducer(std::unique_ptr<comm::Communicator> comm);
  ~CommReducer() override;
  int rank() const override;
  int size() const override;
  void allreduce_sum(std::span<float> data) override;
  void sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) override;

 private:
  std::unique_ptr<comm::Communicator> comm_;
  LogicalSum logical_;
};

// The world size the launcher announced (WORLD_SIZE, SAKER_WORLD_SIZE or srun's
// SLURM_STEP_NUM_TASKS/SLURM_NTASKS); 1 when started by hand.
int launcher_world_size();

}  // namespace saker::train
