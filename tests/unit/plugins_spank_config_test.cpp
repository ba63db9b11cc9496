#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "plugins/spank/config.hpp"

using saker::spank::parse_config;

TEST_CASE("spank plugstack arguments: known keys are read") {
  const auto config = parse_config({"policy=/etc/slurm/saker.yaml"});
  CHECK(config.policy_path == "/etc/slurm/saker.yaml");
  CHECK(parse_config({}).policy_path.empty());
}

TEST_CASE("spank plugstack arguments: unknown keys and empty values are errors") {
  CHECK_THROWS_WITH(parse_config({"polcy=/x"}), Catch::Contains("unknown argument 'polcy=/x'"));
  CHECK_THROWS_WITH(parse_config({"policy="}), Catch::Contains("policy needs a file"));
}
