#include "plugins/common/identity.hpp"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>

namespace saker::plugins {

Identity identity_of(std::uint32_t uid) {
  struct Cached {
    Identity id;
    std::chrono::steady_clock::time_point at;
  };
  static std::mutex mutex;
  static std::unordered_map<std::uint32_t, Cached> cache;
  const auto now = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(uid);
    if (it != cache.end() && now - it->second.at < std::chrono::minutes(5)) return it->second.id;
  }
  Identity id;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    id.user = pw.pw_name;
    int n = 64;
    std::vector<gid_t> gids(static_cast<std::size_t>(n));
    if (getgrouplist(pw.pw_name, pw.pw_gid, gids.data(), &n) < 0) {
      gids.resize(static_cast<std::size_t>(n));
      getgrouplist(pw.pw_name, pw.pw_gid, gids.data(), &n);
    }
    gids.resize(static_cast<std::size_t>(std::max(n, 0)));
    std::vector<char> gbuf(16384);
    for (gid_t g : gids) {
      group gr{};
      group* gfound = nullptr;
      if (getgrgid_r(g, &gr, gbuf.data(), gbuf.size(), &gfound) == 0 && gfound != nullptr) id.groups.emplace_back(gr.gr_name);
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() > 100000) cache.clear();
  cache[uid] = {id, now};
  return id;
}

}  // namespace saker::plugins
