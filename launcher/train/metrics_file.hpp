// The per-run metrics file (--metrics-file): one line per report, appended, in the format
// saker-sweep(1) reads from any program ("METRICS FILE" there):
//   step=120 loss=0.5123 accuracy=0.8125 eval_loss=0.4901 eval_accuracy=0.8311
// Each line goes out in one write() on an O_APPEND descriptor, so a reader never sees
// half a line from this writer, and a requeued run appends after the interrupted one's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace saker::train {

class MetricsFile {
 public:
  // Opens (creating) `path` for appending; throws saker::Error naming the file and why.
  explicit MetricsFile(const std::string& path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  // "step=S name=value ..." (values with 9 significant digits); throws on a failed write.
  void append(std::uint64_t step, const std::vector<std::pair<std::string, double>>& values);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace saker::train
