#include "policies/yaml_doc.hpp"

#include <yaml.h>

#include "policies/yaml_limits.hpp"
#include "saker/policy.hpp"

namespace saker::policy::yaml {

const char* kind_name(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::scalar: return "a scalar";
    case Node::Kind::sequence: return "a list";
    case Node::Kind::mapping: return "a mapping";
  }
  return "?";
}

namespace {
constexpr int kMaxTreeDepth = 256;
}  // namespace

struct Builder {
  Document& doc;
  yaml_document_t& ydoc;
  int depth = 0;

  // The event pass has already refused deeper documents; this guards the recursion.
  const Node* build(yaml_node_t* y) {
    if (++depth > kMaxTreeDepth)
      throw LoadError(doc.file_, static_cast<int>(y->start_mark.line) + 1, static_cast<int>(y->start_mark.column) + 1,
                      "nesting deeper than " + std::to_string(kMaxTreeDepth) + " levels",
                      "a policy as described in saker-policy.yaml(5)");
    auto node = std::make_unique<Node>();
    node->mark = {static_cast<int>(y->start_mark.line) + 1, static_cast<int>(y->start_mark.column) + 1};
    switch (y->type) {
      case YAML_SCALAR_NODE:
        node->kind = Node::Kind::scalar;
        node->scalar.assign(reinterpret_cast<const char*>(y->data.scalar.value), y->data.scalar.length);
        node->quoted = y->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                       y->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
        break;
      case YAML_SEQUENCE_NODE:
        node->kind = Node::Kind::sequence;
        for (auto* it = y->data.sequence.items.start; it < y->data.sequence.items.top; ++it)
          node->items.push_back(build(yaml_document_get_node(&ydoc, *it)));
        break;
      case YAML_MAPPING_NODE:
        node->kind = Node::Kind::mapping;
        for (auto* p = y->data.mapping.pairs.start; p < y->data.mapping.pairs.top; ++p) {
          const Node* k = build(yaml_document_get_node(&ydoc, p->key));
          const Node* v = build(yaml_document_get_node(&ydoc, p->value));
          if (k->kind != Node::Kind::scalar)
            throw LoadError(doc.file_, k->mark.line, k->mark.column, "a mapping key that is not a plain name",
                            "keys such as name: or zone:");
          for (const auto& [seen, _] : node->pairs)
            if (seen->scalar == k->scalar)
              throw LoadError(doc.file_, k->mark.line, k->mark.column,
                              "duplicate key '" + k->scalar + "' (first at line " + std::to_string(seen->mark.line) +
                                  ")",
                              "each key once per mapping");
          node->pairs.emplace_back(k, v);
        }
        break;
      default:
        throw LoadError(doc.file_, node->mark.line, node->mark.column, "an empty node", "a value");
    }
    --depth;
    doc.nodes_.push_back(std::move(node));
    return doc.nodes_.back().get();
  }
};

Document Document::parse(std::string_view text, const std::string& file, const LoadLimits& limits) {
  Document doc;
  doc.file_ = file;
  check_bytes(text, file, limits);
  // One pass over the events before loading: aliases are refused (they also defeat
  // "billion laughs" expansion), and so are nesting and scalars over the limits, in
  // block form too, before libyaml builds a tree of them.
  {
    int depth = 0;
    yaml_parser_t parser;
    if (yaml_parser_initialize(&parser) == 0) throw Error("saker: out of memory initialising libyaml");
    yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
    for (;;) {
      yaml_event_t event;
      if (yaml_parser_parse(&parser, &event) == 0) {
        const LoadError err(file, static_cast<int>(parser.problem_mark.line) + 1,
                            static_cast<int>(parser.problem_mark.column) + 1,
                            std::string("YAML syntax error: ") + (parser.problem != nullptr ? parser.problem : "?") +
                                (parser.context != nullptr ? std::string(" ") + parser.context : std::string()),
                            "well-formed YAML (indent with spaces, 'key: value', '- item')");
        yaml_parser_delete(&parser);
        throw err;
      }
      const auto type = event.type;
      const Mark mark{static_cast<int>(event.start_mark.line) + 1, static_cast<int>(event.start_mark.column) + 1};
      const bool anchored = (type == YAML_SCALAR_EVENT && event.data.scalar.anchor != nullptr) ||
                            (type == YAML_SEQUENCE_START_EVENT && event.data.sequence_start.anchor != nullptr) ||
                            (type == YAML_MAPPING_START_EVENT && event.data.mapping_start.anchor != nullptr);
      const std::size_t scalar_bytes = type == YAML_SCALAR_EVENT ? event.data.scalar.length : 0;
      yaml_event_delete(&event);
      const auto refuse = [&](const std::string& problem, const std::string& expected) {
        yaml_parser_delete(&parser);
        throw LoadError(file, mark.line, mark.column, problem, expected);
      };
      if (type == YAML_ALIAS_EVENT || anchored) refuse("a YAML anchor or alias", "values written out in full");
      if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
        if (++depth > limits.max_depth)
          refuse("nesting deeper than " + std::to_string(limits.max_depth) + " levels",
                 "a policy as described in saker-policy.yaml(5)");
      } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
        --depth;
      }
      if (scalar_bytes > limits.max_scalar_bytes)
        refuse("a value of " + std::to_string(scalar_bytes) + " bytes, over the limit of " +
                   std::to_string(limits.max_scalar_bytes),
               "names, globs and hostlists of reasonable length");
      if (type == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&parser);
  }
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) throw Error("saker: out of memory initialising libyaml");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  yaml_document_t ydoc;
  if (yaml_parser_load(&parser, &ydoc) == 0) {
    const LoadError err(file, static_cast<int>(parser.problem_mark.line) + 1,
                        static_cast<int>(parser.problem_mark.column) + 1,
                        std::string("YAML syntax error: ") + (parser.problem != nullptr ? parser.problem : "?"),
                        "well-formed YAML");
    yaml_parser_delete(&parser);
    throw err;
  }
  yaml_node_t* root = yaml_document_get_root_node(&ydoc);
  try {
    if (root == nullptr) throw LoadError(file, 1, 1, "the file is empty", "a policy starting with 'version: 1'");
    Builder b{doc, ydoc};
    doc.root_ = b.build(root);
  } catch (...) {
    yaml_document_delete(&ydoc);
    yaml_parser_delete(&parser);
    throw;
  }
  yaml_document_delete(&ydoc);
  yaml_parser_delete(&parser);
  return doc;
}

}  // namespace saker::policy::yaml
