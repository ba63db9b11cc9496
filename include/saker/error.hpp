// The exception every Saker library throws for what a caller can recover from or report
// (bad input, an unreachable peer, a corrupt file): public, so that users of the installed
// headers can catch it. Invariants broken inside Saker abort instead (common/error.hpp).
#pragma once

#include <stdexcept>
#include <string>

namespace saker {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds the message the house style asks for: what went wrong, why, and how to fix it.
std::string explain(const std::string& what, const std::string& why, const std::string& fix);

}  // namespace saker
