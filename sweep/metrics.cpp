#include "sweep/metrics.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace saker::sweep {

namespace {

bool whole_number(const std::string& s, std::uint64_t& out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoull(s);
  return true;
}

}  // namespace

Metrics parse_metrics(std::string_view text) {
  Metrics m;
  std::size_t line_no = 0, at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) break;  // still being written
    const std::string line(text.substr(at, end - at));
    at = end + 1;
    ++line_no;
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word[0] == '#') continue;
    const auto skip = [&](const std::string& why) { m.problems.push_back("line " + std::to_string(line_no) + ": " + why); };
    std::uint64_t step = 0;
    if (word.rfind("step=", 0) != 0 || !whole_number(word.substr(5), step)) {
      skip("does not start with step=N");
      continue;
    }
    std::vector<std::pair<std::string, double>> values;
    bool ok = true;
    while (ok && words >> word) {
      const std::size_t eq = word.find('=');
      char* stop = nullptr;
      const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      const double v = std::strtod(value.c_str(), &stop);
      ok = eq != std::string::npos && eq > 0 && !value.empty() && stop == value.c_str() + value.size() && std::isfinite(v);
      if (ok) values.emplace_back(word.substr(0, eq), v);
      else skip("'" + word + "' is not name=number");
    }
    if (!ok) continue;
    for (const auto& [name, v] : values) m.series[name][step] = v;
    m.last_step = std::max(m.last_step, step);
  }
  return m;
}

Metrics read_metrics(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return parse_metrics(text.str());
}

std::optional<std::pair<std::uint64_t, double>> value_at(const Series& series, std::uint64_t budget) {
  auto it = series.upper_bound(budget);
  if (it == series.begin()) return std::nullopt;
  --it;
  return std::make_pair(it->first, it->second);
}

}  // namespace saker::sweep
