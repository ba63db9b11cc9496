#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "plugins/affinity/cpu_list.hpp"

using namespace saker::affinity;

TEST_CASE("affinity cpu lists: parse and format round-trip like the kernel's") {
  CHECK(parse_index_list("0-3,8,10-11", "t") == IndexList{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_index_list("5,1,1,2", "t") == IndexList{1, 2, 5});
  CHECK(parse_index_list("", "t").empty());
  CHECK(format_index_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_index_list({7}) == "7");
  CHECK(format_index_list({}) == "");
  CHECK(intersect({0, 1, 2, 5}, {1, 5, 9}) == IndexList{1, 5});
}

TEST_CASE("affinity cpu lists: bad syntax names the list and the token") {
  CHECK_THROWS_WITH(parse_index_list("0-x", "--cpuset"), Catch::Contains("--cpuset") && Catch::Contains("'x'"));
  CHECK_THROWS_WITH(parse_index_list("4-2", "--cpuset"), Catch::Contains("backwards"));
  CHECK_THROWS_AS(parse_index_list("1,,2", "t"), saker::Error);
}
