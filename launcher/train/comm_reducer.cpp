#include "launcher/train/comm_reducer.hpp"

#include <cstdlib>
#include <string>

#include "saker/comm.hpp"

namespace saker::train {

CommReducer::CommReducer(std::unique_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {}

CommReducer::~CommReducer() = default;
int CommReducer::rank() const { return comm_->rank(); }
int CommReducer::size() const { return comm_->size(); }

void CommReducer::allreduce_sum(std::span<float> data) {
  comm_->allreduce(data.data(), data.size(), comm::DataType::f32, comm::ReduceOp::sum);
}

int launcher_world_size() {
  for (const char* name : {"SAKER_WORLD_SIZE", "WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      const int n = std::atoi(v);
      return n > 0 ? n : 1;
    }
  }
  return 1;
}

}  // namespace saker::train
