// Error handling shared by every Saker library.
//
// The rule (after gloo): throw saker::Error for what a caller can recover from or
// report (bad input, an unreachable peer, a corrupt file); use SAKER_ASSERT for broken
// invariants, which are bugs. Code running inside slurmctld/slurmstepd catches every
// exception at the C boundary (see plugins/).
#pragma once

#include <string>

#include "saker/error.hpp"  // saker::Error and explain(), part of the public API

namespace saker {

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const char* msg);

}  // namespace saker

#define SAKER_ASSERT(expr, msg) \
  ((expr) ? static_cast<void>(0) : ::saker::assert_failed(#expr, __FILE__, __LINE__, (msg)))
