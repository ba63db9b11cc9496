// What every Saker plugin does at the C boundary with a Slurm daemon:
//  - route saker::log to Slurm's own log, so lines land in slurmctld.log/slurmd.log;
//  - run each entry point's body so that no exception ever escapes into the daemon
//    (an exception unwinding through C frames would take slurmctld down for everyone).
#pragma once

extern "C" {
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>  // declares slurm_info/slurm_error/slurm_debug
}

#include <exception>
#include <utility>

#include "common/log.hpp"

namespace saker::plugin {

// Installs a saker::log sink that writes through slurm_info/slurm_error/slurm_debug.
void log_to_slurm();

// Runs body(); on any exception logs "<where>: <what>" and returns on_error instead.
template <typename Body>
int guarded(const char* where, int on_error, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& e) {
    try {
      saker::log::error(std::string(where) + ": " + e.what());
    } catch (...) {
    }
  } catch (...) {
    try {
      saker::log::error(std::string(where) + ": unknown exception");
    } catch (...) {
    }
  }
  return on_error;
}

}  // namespace saker::plugin
