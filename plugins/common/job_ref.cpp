#include "plugins/common/job_ref.hpp"

#include <charconv>

namespace saker::plugins {

namespace {

std::optional<std::uint32_t> number(std::string_view s) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::uint32_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string JobRef::str() const {
  switch (kind) {
    case Kind::het_component: return std::to_string(id) + "+" + std::to_string(part);
    case Kind::array_task: return std::to_string(id) + "_" + std::to_string(part);
    case Kind::plain: break;
  }
  return std::to_string(id);
}

std::optional<JobRef> parse_job_ref(std::string_view text) {
  JobRef r;
  std::string_view head = text, tail;
  if (const auto at = text.find_first_of("+_"); at != std::string_view::npos) {
    head = text.substr(0, at);
    tail = text.substr(at + 1);
    r.kind = text[at] == '+' ? JobRef::Kind::het_component : JobRef::Kind::array_task;
    const auto part = number(tail);
    if (!part) return std::nullopt;
    r.part = *part;
  }
  const auto id = number(head);
  if (!id || *id == 0) return std::nullopt;
  r.id = *id;
  return r;
}

}  // namespace saker::plugins
