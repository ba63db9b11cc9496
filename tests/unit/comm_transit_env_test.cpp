// SAKER_COMM_TRANSIT and the policy's SAKER_COMM_TRANSIT_REQUIRED (spank_saker(8)): a job
// whose datasets demand encrypted transit never starts a communicator in a weaker mode.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "saker/comm.hpp"

using namespace saker::comm;

namespace {

// Sets the two variables for one test and restores an unset state after it.
struct TransitEnv {
  TransitEnv(const char* mode, const char* required) {
    set("SAKER_COMM_TRANSIT", mode);
    set("SAKER_COMM_TRANSIT_REQUIRED", required);
  }
  ~TransitEnv() {
    unsetenv("SAKER_COMM_TRANSIT");
    unsetenv("SAKER_COMM_TRANSIT_REQUIRED");
  }
  static void set(const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
};

std::string error_of(const char* mode, const char* required) {
  TransitEnv env(mode, required);
  try {
    options_from_environment();
  } catch (const saker::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("transit: auth by default, the variable picks the mode", "[comm][transit]") {
  {
    TransitEnv env(nullptr, nullptr);
    CHECK(options_from_environment().transit == Transit::auth);
  }
  for (auto [text, mode] : {std::pair{"auth", Transit::auth}, {"encrypt", Transit::encrypt}, {"off", Transit::off}}) {
    TransitEnv env(text, nullptr);
    CHECK(options_from_environment().transit == mode);
    CHECK(std::string(name_of(mode)) == text);
  }
  CHECK_THAT(error_of("tls", nullptr), Catch::Contains("SAKER_COMM_TRANSIT='tls' is unknown") && Catch::Contains("encrypt"));
}

TEST_CASE("transit: the policy's requirement turns an unset mode into encrypt and refuses a weaker one",
          "[comm][transit]") {
  {
    TransitEnv env(nullptr, "encrypt");
    CHECK(options_from_environment().transit == Transit::encrypt);
  }
  {
    TransitEnv env("encrypt", "encrypt");
    CHECK(options_from_environment().transit == Transit::encrypt);
  }
  for (const char* weaker : {"auth", "off"}) {
    const std::string e = error_of(weaker, "encrypt");
    INFO(e);
    CHECK_THAT(e, Catch::Contains(std::string("must be encrypted, but SAKER_COMM_TRANSIT=") + weaker));
    CHECK_THAT(e, Catch::Contains("transit: encrypt"));         // the reason: the policy
    CHECK_THAT(e, Catch::Contains("saker-run --transit=encrypt"));  // the fix
  }
  CHECK_THAT(error_of(nullptr, "maybe"), Catch::Contains("SAKER_COMM_TRANSIT_REQUIRED='maybe' is unknown"));
}
