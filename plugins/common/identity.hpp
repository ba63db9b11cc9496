// A uid's login name and groups, as the policy's grants need them (both plugins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saker::plugins {

// Name and groups of a uid, cached for 5 minutes (NSS lookups can be slow, and a
// job_submit callback runs under slurmctld's locks). Thread-safe: slurmctld may judge
// submissions from several RPC threads at once (it validates them under a read lock).
struct Identity {
  std::string user;
  std::vector<std::string> groups;
};
Identity identity_of(std::uint32_t uid);

}  // namespace saker::plugins
