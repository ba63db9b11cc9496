#include "launcher/train/metrics_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "common/file.hpp"

namespace saker::train {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  // 0600: the job's user alone reads its metrics; never a file someone else planted.
  std::string why;
  fd_ = file::open_private(path, O_APPEND, 0600, &why);
  if (fd_ < 0)
    throw Error(explain("cannot open the metrics file " + path, why,
                        "pass a --metrics-file of your own in a writable directory"));
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append(std::uint64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string line = "step=" + std::to_string(step);
  char number[40];
  for (const auto& [name, value] : values) {
    std::snprintf(number, sizeof number, "%.9g", value);
    line += " " + name + "=" + number;
  }
  line += "\n";
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    throw Error(explain("cannot append to the metrics file " + path_,
                        n < 0 ? std::strerror(errno) : "short write", "free space on its file system"));
}

}  // namespace saker::train
