// One version string for every program and plugin: configure's PACKAGE_VERSION and the
// Slurm release Saker was built against (a plugin must match the daemons' release).
#pragma once

#include <string>

namespace saker {

// "saker-topo (Saker) 0.1.0, built for Slurm 22.05.8"
std::string version_line(const std::string& program);

// For main(): when argv[1] is --version, prints version_line to stdout and returns true.
// Only the first argument counts: in `saker-run prog --version` the flag is prog's.
bool print_version_if_asked(int argc, char** argv, const char* program);

}  // namespace saker
