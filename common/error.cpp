#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace saker {

std::string explain(const std::string& what, const std::string& why, const std::string& fix) {
  std::string out = what;
  if (!why.empty()) out += ": " + why;
  if (!fix.empty()) out += " (fix: " + fix + ")";
  return out;
}

void assert_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "saker: internal invariant broken: %s at %s:%d: %s\n", expr, file, line, msg);
  std::abort();
}

}  // namespace saker
