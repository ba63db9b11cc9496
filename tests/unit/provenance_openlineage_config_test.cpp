// spank_saker.so's OpenLineage keys in plugstack.conf (plugins/spank/config.hpp).
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "plugins/spank/config.hpp"

using saker::spank::parse_config;

TEST_CASE("spank plugstack arguments: openlineage-dir and openlineage-namespace", "[openlineage]") {
  const auto defaults = parse_config({});
  CHECK(defaults.openlineage_dir.empty());  // no events unless the site asks
  CHECK(defaults.openlineage_namespace == "slurm");
  const auto config = parse_config({"openlineage-dir=/var/spool/saker-openlineage", "openlineage-namespace=slurm://ae1"});
  CHECK(config.openlineage_dir == "/var/spool/saker-openlineage");
  CHECK(config.openlineage_namespace == "slurm://ae1");
  CHECK_THROWS_WITH(parse_config({"openlineage-dir="}), Catch::Contains("openlineage-dir needs a value"));
  CHECK_THROWS_WITH(parse_config({"openlineage-namespace="}), Catch::Contains("write openlineage-namespace=slurm://"));
  CHECK_THROWS_WITH(parse_config({"openlineage=/x"}), Catch::Contains("openlineage-dir=DIR, openlineage-namespace=NAME"));
}
