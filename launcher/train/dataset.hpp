// The training data: X (float32, rows x features) and y (int32 class labels, rows) in
// an HDF5 file that h5py reads as f["X"], f["y"]; the class count is the attribute
// "classes" on the root group. make_synthetic draws a Gaussian-blob problem whose
// difficulty is set by the cluster spread.
#pragma once

#include <functional>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace saker::train {

struct Dataset {
  int rows = 0;
  int features = 0;
  int classes = 0;
  std::vector<float> x;         // row-major rows * features
  std::vector<std::int32_t> y;  // rows
};

struct SyntheticSpec {
  int rows = 4096;
  int features = 16;
  int classes = 4;
  double spread = 1.5;  // standard deviation of each blob around its centre
  std::uint64_t seed = 1;
};

// Deterministic for a given spec.
// `on_rows(done, total)`, when given, is called every few thousand rows (progress display).
Dataset make_synthetic(const SyntheticSpec& spec, const std::function<void(int, int)>& on_rows = {});

// Writes atomically (temporary file, then rename). Throws saker::Error naming the file.
void write_dataset(const Dataset& data, const std::string& path);
// Throws saker::Error naming the file and the dataset when it is missing or malformed
// (wrong rank, labels outside [0, classes)).
Dataset read_dataset(const std::string& path);

// The data file cannot be used as it is: it does not exist, cannot be read, is not an
// HDF5 file, or lacks X/y in the right shape. The message names the file and which;
// saker-train exits 3 on it (saker(7): an input is not usable), which saker-run does not
// retry: every restart would find the same file.
class InputUnusable : public Error {
 public:
  using Error::Error;
};

}  // namespace saker::train
