#include "plugins/affinity/cpu_list.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "common/error.hpp"

namespace saker::affinity {
namespace {

unsigned parse_number(std::string_view s, std::string_view whole, const std::string& what) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value > 1u << 20)
    throw Error(explain(what + ": bad list '" + std::string(whole) + "'",
                        "'" + std::string(s) + "' is not a small non-negative integer",
                        "write indexes and ranges like 0-3,8"));
  return value;
}

}  // namespace

IndexList parse_index_list(std::string_view text, const std::string& what) {
  IndexList out;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const auto dash = item.find('-');
    const unsigned first = parse_number(item.substr(0, dash), text, what);
    const unsigned last = dash == std::string_view::npos ? first : parse_number(item.substr(dash + 1), text, what);
    if (last < first)
      throw Error(explain(what + ": bad range '" + std::string(item) + "'", "the range runs backwards",
                          "write the lower index first, e.g. 2-5"));
    for (unsigned i = first; i <= last; ++i) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_index_list(const IndexList& list) {
  std::string out;
  for (std::size_t i = 0; i < list.size();) {
    std::size_t j = i;
    while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(list[i]);
    if (j > i) out += '-' + std::to_string(list[j]);
    i = j + 1;
  }
  return out;
}

IndexList intersect(const IndexList& a, const IndexList& b) {
  IndexList out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace saker::affinity
