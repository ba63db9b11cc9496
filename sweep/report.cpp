#include "sweep/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "sweep/decide.hpp"

namespace saker::sweep {

namespace {

std::string number(double v, const char* format = "%.6g") {
  char text[40];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::optional<std::size_t> deepest(const TrialState& s) {
  if (s.results.empty()) return std::nullopt;
  return s.results.rbegin()->first;
}

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<TrialState> states_of(const std::vector<Row>& rows) {
  std::vector<TrialState> out;
  for (const Row& r : rows) out.push_back(r.state);
  return out;
}

std::vector<std::size_t> ranking(const Spec& spec, const std::vector<TrialState>& states) {
  std::vector<std::size_t> order;
  for (const TrialState& s : states) order.push_back(s.id);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto da = deepest(states[a]), db = deepest(states[b]);
    if (!da || !db) return da.has_value() && !db.has_value();
    if (*da != *db) return *da > *db;
    return better(spec, states[a].results.at(*da).second, states[b].results.at(*db).second);
  });
  return order;
}

std::optional<std::size_t> best_trial(const Spec& spec, const std::vector<TrialState>& states) {
  const auto order = ranking(spec, states);
  if (order.empty() || !deepest(states[order.front()])) return std::nullopt;
  return order.front();
}

std::string table(const Spec& spec, const std::vector<Row>& rows, const std::vector<std::size_t>& order) {
  const auto best = best_trial(spec, states_of(rows));
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head = {"trial"};
  for (const Param& p : spec.space) head.push_back(p.name);
  for (const char* h : {"state", "rung", "steps"}) head.emplace_back(h);
  head.push_back(spec.metric);
  head.emplace_back("checkpoint");
  cells.push_back(head);
  for (std::size_t id : order) {
    const Row& r = rows[id];
    std::vector<std::string> line = {std::to_string(id) + (best && *best == id ? "*" : "")};
    for (const auto& [_, v] : r.trial.values) line.push_back(v);
    line.emplace_back(state_name(r.state.state));
    line.push_back(r.state.state == State::pending ? "-" : std::to_string(r.state.rung));
    line.push_back(std::to_string(r.metrics.last_step));
    const auto series = r.metrics.series.find(spec.metric);
    line.push_back(series == r.metrics.series.end() || series->second.empty()
                       ? "-" : number(series->second.rbegin()->second));
    line.push_back(r.checkpoint);
    cells.push_back(line);
  }
  std::vector<std::size_t> width(head.size(), 0);
  for (const auto& line : cells)
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  std::string out;
  for (const auto& line : cells) {
    std::string text;
    for (std::size_t c = 0; c < line.size(); ++c)
      text += line[c] + (c + 1 < line.size() ? std::string(width[c] - line[c].size() + 2, ' ') : "");
    out += text + "\n";
  }
  return out;
}

std::vector<std::string> reported_metrics(const std::vector<Row>& rows) {
  std::vector<std::string> out;
  for (const Row& r : rows)
    for (const auto& [name, series] : r.metrics.series)
      if (!series.empty() && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string svg_plot(const Spec& spec, const std::vector<Row>& rows, const std::string& metric,
                     std::optional<bool> maximize) {
  if (!maximize && metric == spec.metric) maximize = spec.maximize;
  constexpr double W = 960, H = 540, left = 80, right = 300, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmax = 1, ymin = std::numeric_limits<double>::infinity(), ymax = -ymin;
  for (const Row& r : rows) {
    const auto s = r.metrics.series.find(metric);
    if (s == r.metrics.series.end()) continue;
    for (const auto& [step, v] : s->second) {
      xmax = std::max(xmax, static_cast<double>(step));
      ymin = std::min(ymin, v);
      ymax = std::max(ymax, v);
    }
  }
  if (!std::isfinite(ymin)) ymin = 0, ymax = 1;
  // Curves that span a decade or more (losses early on) read better on a log axis.
  const bool log_axis = ymin > 0 && ymax / ymin >= 10;
  const auto T = [&](double v) { return log_axis ? std::log10(v) : v; };
  ymin = T(ymin);
  ymax = T(ymax);
  if (ymax - ymin < 1e-12) ymin -= 0.5, ymax += 0.5;
  const double pad = (ymax - ymin) * 0.05;
  ymax += pad;
  ymin = !log_axis && ymin >= 0 && ymin - pad < 0 ? 0 : ymin - pad;  // a linear axis of losses starts at 0
  const auto X = [&](double step) { return left + pw * step / xmax; };
  const auto Y = [&](double v) { return top + ph * (1 - (T(v) - ymin) / (ymax - ymin)); };  // v untransformed
  const auto best = best_trial(spec, states_of(rows));

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(W) + "\" height=\"" + number(H) +
                  "\" viewBox=\"0 0 " + number(W) + " " + number(H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + number(left) + "\" y=\"28\" font-size=\"16\">" +
       xml("sweep " + spec.name + ": " + metric + " against step" +
           (maximize ? std::string(" (") + (*maximize ? "higher" : "lower") + " is better)" : std::string())) +
       "</text>\n";
  // Axes, grid and tick labels.
  s += "<g stroke=\"#999\" fill=\"none\"><rect x=\"" + number(left) + "\" y=\"" + number(top) + "\" width=\"" +
       number(pw) + "\" height=\"" + number(ph) + "\"/></g>\n<g font-size=\"11\" fill=\"#333\">\n";
  for (int i = 0; i <= 5; ++i) {
    const double step = xmax * i / 5, t = ymin + (ymax - ymin) * i / 5, v = log_axis ? std::pow(10.0, t) : t;
    s += "<line x1=\"" + number(X(step)) + "\" y1=\"" + number(top) + "\" x2=\"" + number(X(step)) + "\" y2=\"" +
         number(top + ph) + "\" stroke=\"#eee\"/>";
    s += "<text x=\"" + number(X(step)) + "\" y=\"" + number(top + ph + 16) + "\" text-anchor=\"middle\">" +
         number(std::round(step), "%.0f") + "</text>\n";
    s += "<line x1=\"" + number(left) + "\" y1=\"" + number(Y(v)) + "\" x2=\"" + number(left + pw) + "\" y2=\"" +
         number(Y(v)) + "\" stroke=\"#eee\"/>";
    s += "<text x=\"" + number(left - 6) + "\" y=\"" + number(Y(v) + 4) + "\" text-anchor=\"end\">" +
         number(v, "%.4g") + "</text>\n";
  }
  s += "<text x=\"" + number(left + pw / 2) + "\" y=\"" + number(H - 18) + "\" text-anchor=\"middle\">step</text>\n";
  s += "<text x=\"18\" y=\"" + number(top + ph / 2) + "\" transform=\"rotate(-90 18 " + number(top + ph / 2) +
       ")\" text-anchor=\"middle\">" + xml(metric + (log_axis ? " (log scale)" : "")) + "</text>\n</g>\n";
  // One line per trial; the legend beside the plot.
  std::size_t shown = 0;
  for (const Row& r : rows) {
    const auto series = r.metrics.series.find(metric);
    if (series == r.metrics.series.end() || series->second.empty()) continue;
    const double hue = std::fmod(static_cast<double>(r.trial.id) * 137.508, 360.0);  // golden angle: distinct hues
    const std::string colour = "hsl(" + number(hue, "%.0f") + ",70%,42%)";
    const bool is_best = best && *best == r.trial.id;
    const std::string style = " stroke=\"" + colour + "\" stroke-width=\"" + (is_best ? "3.5" : "1.5") + "\"" +
                              (r.state.state == State::stopped ? " stroke-dasharray=\"6 4\"" : "");
    std::string points;
    for (const auto& [step, v] : series->second)
      points += number(X(static_cast<double>(step)), "%.1f") + "," + number(Y(v), "%.1f") + " ";
    s += "<polyline fill=\"none\"" + style + " points=\"" + points + "\"><title>" +
         xml("trial " + std::to_string(r.trial.id) + " " + std::string(state_name(r.state.state))) + "</title></polyline>\n";
    const double ly = top + 8 + 16.0 * static_cast<double>(shown++);
    if (ly > H - 10) continue;
    const std::string label = "trial " + std::to_string(r.trial.id) + (is_best ? " (best)" : "") + ": " +
                              describe(r.trial) +
                              (r.state.state == State::stopped ? " [stopped]" : "");
    s += "<line x1=\"" + number(left + pw + 14) + "\" y1=\"" + number(ly) + "\" x2=\"" + number(left + pw + 38) +
         "\" y2=\"" + number(ly) + "\"" + style + "/>";
    s += "<text x=\"" + number(left + pw + 44) + "\" y=\"" + number(ly + 4) + "\" font-size=\"11\">" +
         xml(label.size() > 44 ? label.substr(0, 43) + "…" : label) + "</text>\n";
  }
  if (shown == 0)
    s += "<text x=\"" + number(left + pw / 2) + "\" y=\"" + number(top + ph / 2) + "\" text-anchor=\"middle\">" +
         xml("no trial has reported " + metric + " yet") + "</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace saker::sweep
