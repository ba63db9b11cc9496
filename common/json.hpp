// A small JSON writer: enough for audit records, Chrome traces and machine-readable
// CLI output. It writes compact, deterministic text (keys in the order given).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace saker::json {

// The JSON string literal for s, quotes included; control characters and invalid
// UTF-8 bytes are escaped so a record is always one valid line.
std::string quote(std::string_view s);

class Writer {
 public:
  Writer& begin_object();
  Writer& end_object();
  Writer& begin_array();
  Writer& end_array();
  Writer& key(std::string_view k);
  Writer& value(std::string_view s);
  Writer& value(const char* s) { return value(std::string_view(s)); }
  Writer& value(std::int64_t n);
  Writer& value(std::uint64_t n);
  Writer& value(int n) { return value(static_cast<std::int64_t>(n)); }
  Writer& value(unsigned n) { return value(static_cast<std::uint64_t>(n)); }
  Writer& value(double d);
  Writer& value(bool b);
  Writer& null();
  Writer& raw(std::string_view already_json);  // a value that is already valid JSON
  Writer& strings(const std::vector<std::string>& items);  // an array of strings

  const std::string& str() const { return out_; }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace saker::json
