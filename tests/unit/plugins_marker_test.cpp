// The dataset marker in admin_comment and the job id forms (plugins/common): the one
// parser of each, and their fail-closed cases.
#include <catch2/catch.hpp>

#include "plugins/common/dataset_marker.hpp"
#include "plugins/common/job_ref.hpp"

using saker::plugins::JobRef;
using saker::plugins::MarkerRead;
using saker::plugins::parse_job_ref;
using saker::plugins::read_marker;
using saker::plugins::with_marker;
using saker::plugins::without_marker;
using State = MarkerRead::State;

TEST_CASE("a marker reads back what was written", "[plugins][marker]") {
  const std::vector<saker::policy::DatasetRef> ds{{"patients", "v3"}, {"imagenet", ""}};
  const std::string text = with_marker("operator note", ds);
  CHECK(text == "operator note saker-datasets=patients@v3,imagenet");
  const MarkerRead r = read_marker(text.c_str());
  CHECK(r.state == State::present);
  CHECK(r.datasets == ds);
  CHECK(without_marker(text) == "operator note");
  CHECK(with_marker("", ds) == "saker-datasets=patients@v3,imagenet");
}

TEST_CASE("no marker reads as absent", "[plugins][marker]") {
  CHECK(read_marker(nullptr).state == State::absent);
  CHECK(read_marker("").state == State::absent);
  CHECK(read_marker("just a note").state == State::absent);
}

TEST_CASE("a malformed marker fails closed", "[plugins][marker]") {
  for (const char* bad : {"saker-datasets=a,,b", "saker-datasets=a,a", "saker-datasets=a saker-datasets=b",
                          "xsaker-datasets=a", "saker-datasets=bad!name"}) {
    INFO(bad);
    const MarkerRead r = read_marker(bad);
    CHECK(r.state == State::malformed);
    CHECK(r.datasets.empty());
    CHECK_FALSE(r.problem.empty());
  }
}

TEST_CASE("a fresh marker replaces every old one, glued ones included", "[plugins][marker]") {
  const std::string text = with_marker("a saker-datasets=x b xsaker-datasets=y", {{"patients", ""}});
  CHECK(read_marker(text.c_str()).state == State::present);
  CHECK(text == "a b x saker-datasets=patients");
}

TEST_CASE("job ids in every form", "[plugins][job_ref]") {
  CHECK(parse_job_ref("12") == JobRef{JobRef::Kind::plain, 12, 0});
  CHECK(parse_job_ref("12+1") == JobRef{JobRef::Kind::het_component, 12, 1});
  CHECK(parse_job_ref("12_3") == JobRef{JobRef::Kind::array_task, 12, 3});
  CHECK(parse_job_ref("12+1")->str() == "12+1");
  CHECK(parse_job_ref("12_3")->str() == "12_3");
  for (const char* bad : {"", "0", "x", "12_", "12+", "12_[1-3]", "12,13", "12 ", "-1", "4294967296", "12_3_4",
                          "12+1+2", "+1", "_3"}) {
    INFO(bad);
    CHECK_FALSE(parse_job_ref(bad));
  }
}
