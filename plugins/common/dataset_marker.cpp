#include "plugins/common/dataset_marker.hpp"

#include <exception>

namespace saker::plugins {

namespace {

// Splits on single spaces, keeping empty tokens so that text round-trips exactly.
std::vector<std::string_view> tokens(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find(' ', start);
    out.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

bool is_marker(std::string_view token) { return token.substr(0, kMarker.size()) == kMarker; }

}  // namespace

MarkerRead read_marker(const char* text) {
  MarkerRead r;
  if (text == nullptr) return r;
  std::size_t seen = 0;
  std::string_view list;
  for (const auto token : tokens(text))
    if (is_marker(token)) {
      ++seen;
      list = token.substr(kMarker.size());
    }
  if (seen == 0) {
    // A marker glued to other text ("xsaker-datasets=") is not a token, but it is not
    // what an operator writes by accident either: refuse rather than guess.
    if (std::string_view(text).find(kMarker) != std::string_view::npos) {
      r.state = MarkerRead::State::malformed;
      r.problem = "the dataset marker is not a token of its own";
    }
    return r;
  }
  if (seen > 1) {
    r.state = MarkerRead::State::malformed;
    r.problem = "the dataset marker appears " + std::to_string(seen) + " times";
    return r;
  }
  r.state = MarkerRead::State::present;
  if (list.empty()) return r;
  try {
    r.datasets = policy::parse_dataset_list(list);
  } catch (const std::exception& e) {
    r.state = MarkerRead::State::malformed;
    r.datasets.clear();
    r.problem = std::string("the recorded dataset list does not parse: ") + e.what();
  }
  return r;
}

std::string without_marker(std::string_view text) {
  std::string out;
  for (const auto token : tokens(text)) {
    if (is_marker(token) || token.empty()) continue;
    out += (out.empty() ? "" : " ") + std::string(token);
  }
  // A marker glued to other text is cut out too, so a fresh marker is the only one.
  for (std::size_t at; (at = out.find(kMarker)) != std::string::npos;) {
    const std::size_t end = out.find(' ', at);
    out.erase(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return out;
}

std::string with_marker(std::string_view text, const std::vector<policy::DatasetRef>& datasets) {
  std::string out = without_marker(text);
  return out + (out.empty() ? "" : " ") + std::string(kMarker) + policy::format_dataset_list(datasets);
}

}  // namespace saker::plugins
