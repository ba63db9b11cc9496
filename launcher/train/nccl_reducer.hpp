// The trainer's Reducer on the GPU (built only with NCCL). The model's forward and
// backward passes and the optimizer run on the CPU; each step's gradient buffer is
// staged through pinned host memory into device memory, summed by NCCL through
// libsaker_comm (Communicator::allreduce_device) and copied back. NCCL's sum is
// deterministic for a fixed world size and NCCL configuration; its order may differ
// from the host ring's, so a GPU run's weights may differ from a CPU run's (with one or
// two ranks they cannot: a sum of two floats does not depend on the order).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "launcher/train/comm_reducer.hpp"
#include "launcher/train/trainer.hpp"

namespace saker::comm { class Communicator; }

namespace saker::train {

class NcclReducer final : public Reducer {
 public:
  // Collective: sets NCCL up on the device Communicator::nccl_device() assigns to this
  // rank. Throws saker::Error naming the rank and host when that fails.
  explicit NcclReducer(std::unique_ptr<comm::Communicator> comm);
  ~NcclReducer() override;
  int rank() const override;
  int size() const override;
  // Bounded by the communicator's timeout; a timeout names the rank and host that no
  // longer answer on the host ring (or says NCCL itself is stuck).
  void allreduce_sum(std::span<float> data) override;
  // The canonical order cannot be had from NCCL's own allreduce (its order is NCCL's), so
  // the gradients saker-train sums by default go over this rank's host communicator
  // (they are in host memory anyway: the model runs on the CPU); the same bits as a CPU run.
  void sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) override;
  int device() const { return device_; }
  std::string describe() const;  // "GPU 0 (PCI 0000:3b:00.0)"

 private:
  void reserve(std::size_t count);
  void wait_for_stream(std::size_t count);

  std::unique_ptr<comm::Communicator> comm_;
  int device_ = -1;
  std::string pci_;
  void* stream_ = nullptr;    // cudaStream_t
  float* device_buf_ = nullptr;
  float* pinned_buf_ = nullptr;
  std::size_t capacity_ = 0;  // floats in both buffers
  bool stuck_ = false;        // NCCL timed out: never touch the device again (it would hang)
  LogicalSum logical_;
};

}  // namespace saker::train
