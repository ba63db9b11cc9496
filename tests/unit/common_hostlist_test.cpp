#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "common/hostlist.hpp"

using namespace saker::hostlist;

TEST_CASE("hostlist expands Slurm ranges in order") {
  const auto hosts = expand("node[01-03],gpu7");
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0] == "node01");
  CHECK(hosts[2] == "node03");
  CHECK(hosts[3] == "gpu7");
  CHECK(expand("").empty());
}

TEST_CASE("hostlist compresses back to the ranged form") {
  CHECK(compress({"node03", "node01", "node02"}) == "node[01-03]");
  CHECK(compress({}).empty());
}

TEST_CASE("hostlist rejects malformed expressions with the expression in the message") {
  CHECK_THROWS_WITH(expand("node[01-03"), Catch::Contains("node[01-03"));
  CHECK_THROWS_AS(expand("node[1-2]]"), saker::Error);
  CHECK_THROWS_AS(expand("a b"), saker::Error);
}
