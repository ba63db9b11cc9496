// The trainer's Reducer over saker's host ring: one f32 sum-allreduce per step through
// a libsaker_comm communicator (reducer_choice.hpp bootstraps it from saker-run's
// environment: PMI2 under srun, the MASTER_ADDR/MASTER_PORT store under
// saker-run --local).
#pragma once

#include <memory>

#include "launcher/train/trainer.hpp"

namespace saker::comm { class Communicator; }

namespace saker::train {

class CommReducer final : public Reducer {
 public:
  explicit CommReducer(std::unique_ptr<comm::Communicator> comm);
  ~CommReducer() override;
  int rank() const override;
  int size() const override;
  void allreduce_sum(std::span<float> data) override;

 private:
  std::unique_ptr<comm::Communicator> comm_;
};

// The world size the launcher announced (WORLD_SIZE, SAKER_WORLD_SIZE or srun's
// SLURM_STEP_NUM_TASKS/SLURM_NTASKS); 1 when started by hand.
int launcher_world_size();

}  // namespace saker::train
