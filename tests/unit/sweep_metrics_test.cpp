// The metrics file format other programs write (saker-sweep(1), METRICS FILE).
#include <catch2/catch.hpp>

#include "sweep/command.hpp"
#include "sweep/metrics.hpp"

using namespace saker::sweep;

TEST_CASE("metrics lines: last report of a step wins, half lines wait", "[sweep][metrics]") {
  const Metrics m = parse_metrics(
      "# written by saker-train\n"
      "step=25 loss=0.9 eval_loss=0.8\n"
      "\n"
      "step=50 loss=0.7 eval_loss=0.6\n"
      "step=75 loss=0.5\n"
      "step=50 loss=0.7 eval_loss=0.61\n"  // a resumed run repeats step 50
      "step=100 loss=0.4 eval_loss=0.3");   // no newline yet: still being written
  CHECK(m.problems.empty());
  CHECK(m.last_step == 75);
  CHECK(m.series.at("loss").size() == 3);
  CHECK(m.series.at("eval_loss").at(50) == Approx(0.61));
  CHECK(value_at(m.series.at("eval_loss"), 50)->second == Approx(0.61));
  CHECK(value_at(m.series.at("eval_loss"), 74)->first == 50);
  CHECK(value_at(m.series.at("loss"), 1000)->first == 75);
  CHECK_FALSE(value_at(m.series.at("loss"), 24));
}

TEST_CASE("malformed metrics lines are skipped whole and named", "[sweep][metrics]") {
  const Metrics m = parse_metrics(
      "loss=0.3 step=5\n"
      "step=-1 loss=1\n"
      "step=x loss=1\n"
      "step=10 loss=abc\n"
      "step=11 loss=0.5 acc\n"
      "step=12 loss=nan\n"
      "step=13 =4\n"
      "step=14 loss=0.25\n");
  CHECK(m.problems.size() == 7);
  CHECK(m.problems[0] == "line 1: does not start with step=N");
  CHECK(m.problems[3] == "line 4: 'loss=abc' is not name=number");
  REQUIRE(m.series.at("loss").size() == 1);
  CHECK(m.series.at("loss").at(14) == 0.25);
  CHECK(read_metrics("/nonexistent/metrics").series.empty());
}

TEST_CASE("command templates fill placeholders word by word, never through a shell", "[sweep][command]") {
  const auto t = CommandTemplate::parse_string("  train --lr={lr}   --x {{literal}} {budget}steps ");
  CHECK(t.placeholders() == std::set<std::string>{"lr", "budget"});
  CHECK(t.render({{"lr", "0.1; rm -rf /"}, {"budget", "5"}}) ==
        std::vector<std::string>{"train", "--lr=0.1; rm -rf /", "--x", "{literal}", "5steps"});
  CHECK_THROWS_WITH(t.render({{"lr", "1"}}), Catch::Contains("{budget} has no value"));
  CHECK_THROWS_WITH(CommandTemplate::parse_string("a {b"), Catch::Contains("column 3"));
  CHECK(CommandTemplate::shell_line({"a", "b c", "it's", "--x=1"}) == "a 'b c' 'it'\\''s' --x=1");
}
