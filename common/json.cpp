#include "common/json.hpp"

#include <cmath>
#include <cstdio>

#include "common/error.hpp"

namespace saker::json {

std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f || c >= 0x80) {
          // Non-ASCII bytes are escaped one by one: lossless for the audit chain,
          // and never invalid UTF-8 in the output.
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

void Writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

Writer& Writer::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

Writer& Writer::end_object() {
  SAKER_ASSERT(!first_.empty(), "json: end_object without begin_object");
  first_.pop_back();
  out_ += '}';
  return *this;
}

Writer& Writer::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

Writer& Writer::end_array() {
  SAKER_ASSERT(!first_.empty(), "json: end_array without begin_array");
  first_.pop_back();
  out_ += ']';
  return *this;
}

Writer& Writer::key(std::string_view k) {
  separate();
  out_ += quote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

Writer& Writer::value(std::string_view s) {
  separate();
  out_ += quote(s);
  return *this;
}

Writer& Writer::value(std::int64_t n) {
  separate();
  out_ += std::to_string(n);
  return *this;
}

Writer& Writer::value(std::uint64_t n) {
  separate();
  out_ += std::to_string(n);
  return *this;
}

Writer& Writer::value(double d) {
  separate();
  if (!std::isfinite(d)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  out_ += buf;
  return *this;
}

Writer& Writer::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
  return *this;
}

Writer& Writer::null() {
  separate();
  out_ += "null";
  return *this;
}

Writer& Writer::raw(std::string_view already_json) {
  separate();
  out_ += already_json;
  return *this;
}

Writer& Writer::strings(const std::vector<std::string>& items) {
  begin_array();
  for (const auto& s : items) value(std::string_view(s));
  return end_array();
}

}  // namespace saker::json
