// Which Reducer saker-train sums its gradients with: NCCL on the GPU (NcclReducer, in
// builds with NCCL) or saker's host ring (CommReducer), picked by decide_device() over
// every rank's GpuProbe so that all ranks take the same path.
#pragma once

#include <memory>
#include <string>

#include "launcher/train/device.hpp"
#include "launcher/train/trainer.hpp"

namespace saker::comm { class Communicator; }

namespace saker::train {

struct ReducerChoice {
  std::unique_ptr<Reducer> reducer;
  DeviceDecision decision;
  // The start-up line rank 0 prints, e.g. "saker-train: NCCL set up on GPU 0 (PCI
  // 0000:3b:00.0) (...); gradients are summed in saker's canonical order over the host
  // ring, ..." or "saker-train: gradients allreduced over saker's host ring (no CUDA device
  // visible: ...)".
  std::string line;
};

// Collective over comm: every rank's probe travels in one allgather, decide_device()
// picks the path, and the communicator moves into the matching reducer (NCCL is set up
// for the GPU). Throws saker::Error on every rank alike when `wanted` cannot be met.
ReducerChoice reducer_over(std::unique_ptr<comm::Communicator> comm, Device wanted, const GpuProbe& mine);

// saker-train's reducer. More than one rank (launcher_world_size()): a communicator
// from saker-run's environment, then reducer_over(). One rank: the gradients stay in
// host memory (SoloReducer), except on the GPU path, which runs NCCL over a one-rank
// communicator so that one rank takes the same path as many.
ReducerChoice make_reducer(Device wanted);

}  // namespace saker::train
