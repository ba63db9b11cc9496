// The trial table and the SVG plot: one row and one curve per trial, the best marked,
// stopped trials dashed, text escaped, a log axis for curves that span decades.
#include <catch2/catch.hpp>

#include "sweep/report.hpp"

using namespace saker::sweep;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<Row> rows(const Spec& s, double first_loss) {
  std::vector<Row> out;
  for (const Trial& t : make_trials(s)) {
    Row r{t, {}, parse_metrics("step=10 loss=" + std::to_string(first_loss * (t.id + 1)) + "\nstep=20 loss=" +
                               std::to_string(0.1 * (t.id + 1)) + "\n"), "-"};
    r.state.id = t.id;
    r.state.state = t.id == 2 ? State::stopped : State::completed;
    r.state.results[0] = {20, 0.1 * (t.id + 1)};
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("the table has a row per trial, the best first in ranking order and marked", "[sweep][report]") {
  const Spec s = load_string("version: 1\nname: r\ncommand: run {w} {budget}\nspace: {w: {grid: [a<&>, b, c]}}\n"
                             "metric: {name: loss}\nbudget: {steps: 20}\n", "r.yaml", "/b");
  const auto rs = rows(s, 0.2);  // 0.1 to 0.6: a linear axis
  const std::string t = table(s, rs, ranking(s, states_of(rs)));
  INFO(t);
  CHECK(t.rfind("trial  w     state", 0) == 0);
  CHECK(t.find("\n0*     a<&>  completed  0     20     0.1   -\n") != std::string::npos);
  CHECK(count(t, "\n") == 4);
  const std::string svg = svg_plot(s, rs, "loss");
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(count(svg, "<polyline") == 3);
  CHECK(count(svg, "stroke-dasharray") == 2);  // trial 2's curve and its legend line
  CHECK(svg.find("stroke-width=\"3.5\"") != std::string::npos);  // the best, thick
  CHECK(svg.find("w=a&lt;&amp;&gt;") != std::string::npos);  // escaped
  CHECK(svg.find("a<&>") == std::string::npos);
  CHECK(svg.find("log scale") == std::string::npos);
  CHECK(svg_plot(s, rows(s, 50), "loss").find("loss (log scale)") != std::string::npos);
  CHECK(svg_plot(s, rs, "accuracy").find("no trial has reported accuracy yet") != std::string::npos);
  // Which way is better: the sweep's goal for its metric, the given one, or not said.
  CHECK(svg.find("sweep r: loss against step (lower is better)") != std::string::npos);
  CHECK(svg_plot(s, rs, "accuracy").find("is better") == std::string::npos);
  CHECK(svg_plot(s, rs, "accuracy", true).find("accuracy against step (higher is better)") != std::string::npos);
  CHECK(reported_metrics(rs) == std::vector<std::string>{"loss"});
}
