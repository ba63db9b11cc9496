#include "launcher/train/comm_reducer.hpp"

#include <cstdlib>
#include <string>

#include "launcher/comm/ordered_reduce.hpp"
#include "saker/comm.hpp"

namespace saker::train {

CommReducer::CommReducer(std::unique_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {}

CommReducer::~CommReducer() = default;
int CommReducer::rank() const { return comm_->rank(); }
int CommReducer::size() const { return comm_->size(); }

void CommReducer::allreduce_sum(std::span<float> data) {
  comm_->allreduce(data.data(), data.size(), comm::DataType::f32, comm::ReduceOp::sum);
}

void CommReducer::sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) {
  logical_.sum(*comm_, logical, parts, count, out);
}

LogicalSum::LogicalSum() = default;
LogicalSum::~LogicalSum() = default;

void LogicalSum::sum(comm::Communicator& comm, int logical, std::span<float* const> parts, std::size_t count,
                     float* out) {
  if (!reduce_ || reduce_->map().logical() != logical) reduce_ = std::make_unique<comm::OrderedReduce>(comm, logical);
  reduce_->sum(parts, count, out);
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
