#include "policies/yaml_limits.hpp"

namespace saker::policy::yaml {

namespace {

std::string human_bytes(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= (1u << 10) && n % (1u << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " bytes";
}

}  // namespace

void check_bytes(std::string_view text, const std::string& file, const LoadLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw LoadError(file, 0, 0, "the file is larger than the limit of " + human_bytes(limits.max_bytes),
                    "a policy file (a real one is a few KiB); raise the limit only if yours is genuinely that "
                    "large (saker-policy --max-bytes, max_policy_bytes= in job_submit_saker.conf)");
  int line = 1, column = 0, depth = 0;
  char quote = 0;        // the open quote character, 0 outside a quoted scalar
  bool comment = false;  // inside a '#' comment, up to the end of the line
  char before = '\n';    // the previous byte ('#' starts a comment only after blank space)
  for (const char c : text) {
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      comment = false;
      before = c;
      continue;  // a quoted scalar may span lines; keep `quote`
    }
    if (comment) continue;
    if (quote != 0) {
      // '' inside single quotes and \" inside double quotes are escapes: both leave the
      // scalar open, which toggling twice (for '') or skipping (for \") reproduces.
      if (c == quote && !(quote == '"' && before == '\\')) quote = 0;
      before = (before == '\\' && c == '\\') ? ' ' : c;
      continue;
    }
    if (c == '#' && (before == ' ' || before == '\t' || before == '\n')) comment = true;
    else if ((c == '"' || c == '\'') && (depth > 0 || before == ' ' || before == '\t' || before == '\n' ||
                                         before == '[' || before == '{' || before == ',' || before == ':' ||
                                         before == '-'))
      quote = c;
    else if (c == '[' || c == '{') {
      if (++depth > limits.max_depth)
        throw LoadError(file, line, column, "nesting deeper than " + std::to_string(limits.max_depth) + " levels",
                        "a policy as described in saker-policy.yaml(5)");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    before = c;
  }
}

}  // namespace saker::policy::yaml
