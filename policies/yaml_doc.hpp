// A YAML document as a small tree that remembers where each node came from, so that
// every loader error can name FILE:LINE:COLUMN. Built on libyaml's document API.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "saker/policy.hpp"

namespace saker::policy::yaml {

struct Mark {
  int line = 0;    // 1-based
  int column = 0;  // 1-based
};

struct Node {
  enum class Kind { scalar, sequence, mapping };
  Kind kind = Kind::scalar;
  Mark mark;
  std::string scalar;                                      // Kind::scalar
  bool quoted = false;                                     // scalar was written in quotes
  std::vector<const Node*> items;                          // Kind::sequence
  std::vector<std::pair<const Node*, const Node*>> pairs;  // Kind::mapping, in file order
};

// Owns every node of one document.
class Document {
 public:
  // Parses text; throws LoadError(file:line:column) on a YAML syntax error, on aliases
  // (not allowed in policies: they hide what a rule says), on an empty document and on
  // anything over `limits` (checked on the bytes and on the parser's events, before the
  // tree is built).
  static Document parse(std::string_view text, const std::string& file, const LoadLimits& limits = {});
  const Node& root() const { return *root_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<std::unique_ptr<Node>> nodes_;
  const Node* root_ = nullptr;
  friend struct Builder;
};

const char* kind_name(Node::Kind kind);

}  // namespace saker::policy::yaml
