// spank_saker.so's per-step job key (srun, local context).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "plugins/spank/job_key.hpp"

using namespace saker::spank;

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}
}  // namespace

TEST_CASE("a plain srun step gets a fresh job key; one already given is kept") {
  ::unsetenv(kJobKeyEnv);
  ::unsetenv(kJobKeyFileEnv);
  REQUIRE(ensure_step_job_key().empty());
  const std::string first = env(kJobKeyEnv);
  CHECK(first.size() == 64);
  CHECK(first.find_first_not_of("0123456789abcdef") == std::string::npos);
  // saker-run's per-attempt key (or the user's) is never replaced.
  REQUIRE(ensure_step_job_key().empty());
  CHECK(env(kJobKeyEnv) == first);
  // The next step (a new srun process) gets another key.
  ::unsetenv(kJobKeyEnv);
  REQUIRE(ensure_step_job_key().empty());
  CHECK(env(kJobKeyEnv).size() == 64);
  CHECK(env(kJobKeyEnv) != first);
  // A key file the user chose is left to the library: no second key beside it.
  ::unsetenv(kJobKeyEnv);
  ::setenv(kJobKeyFileEnv, "/home/u/.saker/key", 1);
  REQUIRE(ensure_step_job_key().empty());
  CHECK(env(kJobKeyEnv).empty());
  ::unsetenv(kJobKeyFileEnv);
}
