#include "common/version.hpp"

#include <cstdio>
#include <cstring>

#include "config.h"

namespace saker {

std::string version_line(const std::string& program) {
  return program + " (Saker) " PACKAGE_VERSION ", built for Slurm " SAKER_SLURM_VERSION;
}

bool print_version_if_asked(int argc, char** argv, const char* program) {
  if (argc < 2 || std::strcmp(argv[1], "--version") != 0) return false;
  std::printf("%s\n", version_line(program).c_str());
  return true;
}

}  // namespace saker
