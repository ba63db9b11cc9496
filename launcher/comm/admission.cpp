#include "launcher/comm/admission.hpp"

#include <unordered_map>

namespace saker::comm::admission {

std::string_view host_of(std::string_view address) {
  auto colon = address.rfind(':');
  return colon == std::string_view::npos ? address : address.substr(0, colon);
}

std::optional<std::size_t> victim(const std::vector<std::string_view>& silent_hosts) {
  struct Tally {
    std::size_t count = 0, oldest = 0;
  };
  std::unordered_map<std::string_view, Tally> by_host;
  for (std::size_t i = 0; i < silent_hosts.size(); ++i) {
    auto [it, fresh] = by_host.try_emplace(silent_hosts[i]);
    if (fresh) it->second.oldest = i;
    ++it->second.count;
  }
  std::optional<std::size_t> pick;
  std::size_t most = 0;
  for (const auto& [host, t] : by_host)
    if (t.count > most || (t.count == most && pick && t.oldest < *pick)) {
      most = t.count;
      pick = t.oldest;
    }
  return pick;
}

}  // namespace saker::comm::admission
