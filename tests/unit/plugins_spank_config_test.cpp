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

TEST_CASE("spank plugstack arguments: affinity mode, topology file and strict") {
  using saker::spank::AffinityMode;
  const auto defaults = parse_config({});
  CHECK(defaults.affinity == AffinityMode::automatic);
  CHECK(defaults.topology_path.empty());
  CHECK_FALSE(defaults.strict);
  const auto config = parse_config({"gpu-affinity=explain", "topology=/var/spool/topo.xml", "strict", "policy=/p.yaml"});
  CHECK(config.affinity == AffinityMode::explain);
  CHECK(config.topology_path == "/var/spool/topo.xml");
  CHECK(config.strict);
  CHECK(config.policy_path == "/p.yaml");
  CHECK(parse_config({"gpu-affinity=none"}).affinity == AffinityMode::none);
}

TEST_CASE("spank plugstack arguments: bad affinity arguments are errors") {
  CHECK_THROWS_WITH(parse_config({"gpu-affinity=closest"}), Catch::Contains("unknown mode 'closest'"));
  CHECK_THROWS_WITH(parse_config({"gpu-affinity="}), Catch::Contains("gpu-affinity needs a value"));
  CHECK_THROWS_WITH(parse_config({"topology="}), Catch::Contains("topology needs a value"));
  CHECK_THROWS_WITH(parse_config({"strict=yes"}), Catch::Contains("strict is a flag"));
  CHECK_THROWS_WITH(parse_config({"topolgy=/x"}), Catch::Contains("accepted: policy=FILE"));
  CHECK_THROWS_WITH(saker::spank::parse_affinity_mode("bind", "--gpu-affinity"),
                    Catch::Contains("--gpu-affinity: unknown mode 'bind'"));
}

TEST_CASE("spank plugstack arguments: omp-bind is the site's default for --omp-bind, none unless set") {
  using saker::affinity::OmpBind;
  CHECK(parse_config({}).omp_bind == OmpBind::none);
  CHECK(parse_config({"omp-bind=close"}).omp_bind == OmpBind::close);
  CHECK(parse_config({"omp-bind=spread", "gpu-affinity=explain"}).omp_bind == OmpBind::spread);
  CHECK(parse_config({"omp-bind=close", "omp-bind=none"}).omp_bind == OmpBind::none);
}

TEST_CASE("spank plugstack arguments: a bad omp-bind names the key, the value and the choices") {
  CHECK_THROWS_WITH(parse_config({"omp-bind=true"}),
                    Catch::Contains("plugstack.conf: omp-bind: unknown value 'true'") &&
                        Catch::Contains("none, close and spread"));
  CHECK_THROWS_WITH(parse_config({"omp-bind=CLOSE"}), Catch::Contains("unknown value 'CLOSE'"));
  CHECK_THROWS_WITH(parse_config({"omp-bind="}), Catch::Contains("omp-bind needs a value"));
  CHECK_THROWS_WITH(parse_config({"omp-bind"}), Catch::Contains("omp-bind needs a value"));
  CHECK_THROWS_WITH(parse_config({"omp_bind=close"}),
                    Catch::Contains("unknown argument 'omp_bind=close'") && Catch::Contains("omp-bind=none|close|spread"));
}
