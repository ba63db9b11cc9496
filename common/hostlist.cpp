#include "common/hostlist.hpp"

#include <slurm/slurm.h>

#include <cstdlib>
#include <memory>
#include <type_traits>

#include "common/error.hpp"
#include "common/slurm_compat.hpp"

namespace saker::hostlist {
namespace {

using Owned = std::unique_ptr<std::remove_pointer_t<slurm_compat::Hostlist>, decltype(&slurm_hostlist_destroy)>;

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
  slurm_compat::Hostlist raw = slurm_hostlist_create(expression.c_str());
  if (raw == nullptr)
    throw Error(explain("bad hostlist '" + expression + "'", "Slurm's parser rejected it",
                        "write it as Slurm does, e.g. node[01-16],gpu7"));
  const Owned list(raw, &slurm_hostlist_destroy);
  std::vector<std::string> hosts;
  while (char* host = slurm_hostlist_shift(raw)) {
    hosts.emplace_back(host);
    std::free(host);
  }
  return hosts;
}

std::string compress(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return {};
  slurm_compat::Hostlist raw = slurm_hostlist_create(nullptr);
  if (raw == nullptr) throw Error("hostlist: out of memory");
  const Owned list(raw, &slurm_hostlist_destroy);
  for (const auto& h : hosts) slurm_hostlist_push_host(raw, h.c_str());
  slurm_hostlist_uniq(raw);
  // The fixed-buffer call exists in every release (the allocating ones changed allocator).
  std::string out(256, '\0');
  for (;;) {
    const ssize_t n = slurm_hostlist_ranged_string(raw, out.size(), out.data());
    if (n >= 0 && static_cast<std::size_t>(n) < out.size()) {
      out.resize(static_cast<std::size_t>(n));
      return out;
    }
    if (out.size() > (64u << 20)) throw Error("hostlist: host names too long to compress");
    out.resize(out.size() * 4);
  }
}

}  // namespace saker::hostlist
