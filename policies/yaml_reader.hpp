// The checks every Saker YAML loader makes on a node (the policy loader, the sweep
// loader): each failure is a LoadError naming FILE:LINE:COLUMN, the problem and what was
// expected. Header-only, so each loader (and the loader's fuzz target) compiles it in.
#pragma once

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <map>
#include <string>

#include "policies/yaml_doc.hpp"
#include "saker/policy.hpp"

namespace saker::policy::yaml {

class Reader {
 public:
  explicit Reader(const Document& doc) : doc_(doc) {}

  [[noreturn]] void fail(const Node& at, const std::string& problem, const std::string& expected) const {
    throw LoadError(doc_.file(), at.mark.line, at.mark.column, problem, expected);
  }

  void expect(const Node& n, Node::Kind kind, const std::string& what) const {
    if (n.kind != kind) fail(n, what + " is " + kind_name(n.kind), std::string(kind_name(kind)) + " for " + what);
  }

  // The fields of a mapping; an unknown key is an error (a typo must never silently
  // disable a rule or change a sweep), and so is a missing required one.
  std::map<std::string, const Node*> fields(const Node& n, const std::string& what,
                                            std::initializer_list<const char*> allowed,
                                            std::initializer_list<const char*> required = {}) const {
    expect(n, Node::Kind::mapping, what);
    std::map<std::string, const Node*> out;
    for (const auto& [k, v] : n.pairs) {
      // The key by a plain reference: clang before 16 cannot capture a structured binding,
      // and the fuzz targets (make fuzz) are built with clang.
      const std::string& key = k->scalar;
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail(*k, "unknown key '" + k->scalar + "' in " + what, "one of: " + list);
      }
      out[k->scalar] = v;
    }
    for (const char* r : required)
      if (out.count(r) == 0) fail(n, what + " has no '" + r + "'", std::string("a '") + r + ":' entry");
    return out;
  }

  const std::string& scalar(const Node& n, const std::string& what) const {
    expect(n, Node::Kind::scalar, what);
    if (n.scalar.empty()) fail(n, what + " is empty", "a value");
    return n.scalar;
  }

  // Names: letters, digits, '.', '_', '-', starting with a letter or digit, at most
  // max_length characters (they end up in file names, job names and log lines).
  const std::string& name(const Node& n, const std::string& what, std::size_t max_length = 128) const {
    const std::string& s = scalar(n, what);
    bool ok = std::isalnum(static_cast<unsigned char>(s[0])) != 0 && s.size() <= max_length;
    for (char c : s) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-');
    if (!ok)
      fail(n, "bad " + what + " '" + s + "'",
           "letters, digits, '.', '_' or '-' (starting with a letter or digit, at most " + std::to_string(max_length) +
               ")");
    return s;
  }

 private:
  const Document& doc_;
};

}  // namespace saker::policy::yaml
