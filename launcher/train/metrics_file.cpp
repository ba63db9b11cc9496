#include "launcher/train/metrics_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"

namespace saker::train {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(explain("cannot open the metrics file " + path, std::strerror(errno),
                        "pass a --metrics-file in a writable directory"));
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
