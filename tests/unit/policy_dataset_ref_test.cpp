#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "policies/dataset_ref.hpp"

using namespace saker::policy;

TEST_CASE("dataset lists parse names and optional versions in order") {
  const auto refs = parse_dataset_list("imagenet@2012,patients,cifar-10@v1.2_b");
  REQUIRE(refs.size() == 3);
  CHECK(refs[0] == DatasetRef{"imagenet", "2012"});
  CHECK(refs[1] == DatasetRef{"patients", ""});
  CHECK(refs[2].str() == "cifar-10@v1.2_b");
  CHECK(format_dataset_list(refs) == "imagenet@2012,patients,cifar-10@v1.2_b");
}

TEST_CASE("bad dataset values are refused with the element, the reason and the syntax") {
  CHECK_THROWS_WITH(parse_dataset_list(""), Catch::Contains("empty --dataset"));
  CHECK_THROWS_WITH(parse_dataset_list("a,,b"), Catch::Contains("empty name"));
  CHECK_THROWS_WITH(parse_dataset_list("pat/ients"), Catch::Contains("'pat/ients'") && Catch::Contains("'/'"));
  CHECK_THROWS_WITH(parse_dataset_list("x@"), Catch::Contains("empty version"));
  CHECK_THROWS_WITH(parse_dataset_list("@v1"), Catch::Contains("empty name"));
  CHECK_THROWS_WITH(parse_dataset_list("a@b@c"), Catch::Contains("'@'"));
  CHECK_THROWS_WITH(parse_dataset_list("-x"), Catch::Contains("start with a letter"));
  CHECK_THROWS_WITH(parse_dataset_list("a,a"), Catch::Contains("listed twice"));
  CHECK_THROWS_WITH(parse_dataset_list(std::string(200, 'n')), Catch::Contains("longer than"));
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? ",d" : "d") + std::to_string(i);
  CHECK_THROWS_WITH(parse_dataset_list(many), Catch::Contains("more than 64"));
  CHECK_THROWS_WITH(parse_dataset_list("a b"), Catch::Contains("NAME[@VERSION]"));
  CHECK_NOTHROW(parse_dataset_list("a"));
}

TEST_CASE("datasets are read back from the job's control environment") {
  const char* env[] = {"OTHER=1", "SAKER_DATASETSX=nope", "SAKER_DATASETS=a@1,b"};
  const auto refs = datasets_from_env(env, 3);
  REQUIRE(refs.size() == 2);
  CHECK(refs[1].name == "b");
  const char* none[] = {"OTHER=1"};
  CHECK(datasets_from_env(none, 1).empty());
  CHECK(datasets_from_env(nullptr, 0).empty());
}
