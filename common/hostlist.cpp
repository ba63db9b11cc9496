#include "common/hostlist.hpp"

#include <slurm/slurm.h>

#include <cstdlib>
#include <memory>
#include <type_traits>

#include "common/error.hpp"

namespace saker::hostlist {
namespace {

using Hostlist = std::unique_ptr<std::remove_pointer_t<hostlist_t>, decltype(&slurm_hostlist_destroy)>;

bool balanced_brackets(const std::string& s) {
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return false;
    if (depth > 1) return false;
  }
  return depth == 0;
}

}  // namespace

std::vector<std::string> expand(const std::string& expression) {
  if (expression.empty()) return {};
  // libslurm accepts some malformed input silently (an unclosed bracket becomes a
  // literal host name), so reject what Slurm itself would never produce.
  if (!balanced_brackets(expression) || expression.find_first_of(" \t\n") != std::string::npos)
    throw Error(explain("bad hostlist '" + expression + "'", "unbalanced brackets or whitespace",
                        "write it as Slurm does, e.g. node[01-16],gpu7"));
  hostlist_t raw = slurm_hostlist_create(expression.c_str());
  if (raw == nullptr)
    throw Error(explain("bad hostlist '" + expression + "'", "Slurm's parser rejected it",
                        "write it as Slurm does, e.g. node[01-16],gpu7"));
  Hostlist list(raw, &slurm_hostlist_destroy);
  std::vector<std::string> hosts;
  while (char* host = slurm_hostlist_shift(raw)) {
    hosts.emplace_back(host);
    std::free(host);
  }
  return hosts;
}

std::string compress(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return {};
  hostlist_t raw = slurm_hostlist_create(nullptr);
  if (raw == nullptr) throw Error("hostlist: out of memory");
  Hostlist list(raw, &slurm_hostlist_destroy);
  for (const auto& h : hosts) slurm_hostlist_push_host(raw, h.c_str());
  slurm_hostlist_uniq(raw);
  char* ranged = slurm_hostlist_ranged_string_malloc(raw);
  if (ranged == nullptr) throw Error("hostlist: out of memory compressing host names");
  std::string out(ranged);
  std::free(ranged);
  return out;
}

}  // namespace saker::hostlist
