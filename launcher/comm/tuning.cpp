#include "launcher/comm/tuning.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <fstream>

#include "common/error.hpp"

namespace saker::comm {
namespace {

// Exchanges up to this size busy-poll when the machine has a core for every spinning
// rank: the 4 KiB allreduce is dominated by wake-ups otherwise. Past it, or when ranks
// outnumber cores, a spinning rank only delays the copies of the rank it waits for.
constexpr std::size_t kBusyPollSpare = 8u << 20;
constexpr std::size_t kBusyPollCrowded = 256u << 10;

}  // namespace

bool env_size(const char* name, std::size_t* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || *v == '-')
    throw Error(explain(std::string(name) + "='" + v + "' is not a whole number", "it must be a count >= 0",
                        "fix or unset the variable"));
  *out = static_cast<std::size_t>(x);
  return true;
}

double RecentTimes::typical() const {
  std::array<double, 4> v{};
  std::size_t n = 0;
  for (double x : seconds_per_byte) {
    if (x <= 0) continue;  // not measured yet
    std::size_t i = n++;
    for (; i > 0 && v[i - 1] > x; --i) v[i] = v[i - 1];  // insertion: at most four
    v[i] = x;
  }
  if (n == 0) return 0;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool TimedChoice::second(std::size_t bytes) const {
  const Stats& s = by_size_[size_class(bytes)];
  if (s.calls < 9) return s.calls != 0 && s.calls % 2 == 0;  // a cold first call, then each in turn, four times
  bool best = s.agreed >= 0 ? s.agreed == 1 : s.mode[1].typical() < s.mode[0].typical();
  return s.calls % 32 == 0 ? !best : best;  // look at the other one now and then
}

void TimedChoice::record(std::size_t bytes, bool second, double seconds) {
  Stats& s = by_size_[size_class(bytes)];
  if (s.calls++ == 0) return;  // first touches and page faults say nothing about the choice
  s.mode[second ? 1 : 0].add(seconds / static_cast<double>(bytes));
}

bool TimedChoice::agreement_due(std::size_t bytes) const {
  std::uint64_t calls = by_size_[size_class(bytes)].calls;
  return calls >= 9 && (calls - 9) % 8 == 0;
}

std::array<double, 2> TimedChoice::figures(std::size_t bytes) const {
  const Stats& s = by_size_[size_class(bytes)];
  return {s.mode[0].typical(), s.mode[1].typical()};
}

void TimedChoice::agree(std::size_t bytes, bool second) { by_size_[size_class(bytes)].agreed = second ? 1 : 0; }

int cores_online() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in >> id && !id.empty()) return id;
  return "unknown";
}

Cache last_level_cache(const std::string& sysfs) {
  Cache best;
  for (int i = 0;; ++i) {
    std::string dir = sysfs + "/index" + std::to_string(i) + "/";
    std::ifstream size_in(dir + "size"), type_in(dir + "type"), shared_in(dir + "shared_cpu_list");
    if (!size_in) break;
    std::string type, list;
    std::size_t kib = 0;
    char unit = 0;
    if (!(size_in >> kib >> unit) || unit != 'K' || !(type_in >> type) || type == "Instruction") continue;
    // shared_cpu_list: "0-1,8-9": count the CPUs.
    int cpus = 0;
    std::getline(shared_in, list);
    for (std::size_t at = 0; at < list.size();) {
      std::size_t comma = list.find(',', at);
      std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      int a = 0, b = 0;
      if (std::sscanf(item.c_str(), "%d-%d", &a, &b) == 2) cpus += b - a + 1;
      else if (std::sscanf(item.c_str(), "%d", &a) == 1) cpus += 1;
      at = comma == std::string::npos ? list.size() : comma + 1;
    }
    if (kib * 1024 > best.bytes) best = {kib * 1024, std::max(1, cpus)};
  }
  return best;
}

LinkPlan plan_links(int online, int ranks_here, Cache cache) {
  LinkPlan p;
  ranks_here = std::max(1, ranks_here);
  if (cache.bytes > 0) {
    // The ranks of this job that share the cache: those here, at most its CPUs.
    std::size_t sharing = static_cast<std::size_t>(std::max(1, std::min(ranks_here, cache.cpus)));
    p.block_bytes = std::clamp<std::size_t>(cache.bytes / 4 / sharing, 1u << 20, 64u << 20);
  }
  // Whether ranks are bound does not matter: one bound to a core spins only on its own.
  p.busy_poll_bytes = online >= ranks_here ? kBusyPollSpare : kBusyPollCrowded;
  std::size_t v = 0;
  if (env_size("SAKER_COMM_SEND_THREAD", &v)) p.send_thread = v != 0 ? 1 : 0;
  env_size("SAKER_COMM_BUSY_POLL_BYTES", &p.busy_poll_bytes);
  env_size("SAKER_COMM_BLOCK_BYTES", &p.block_bytes);
  bool direct = env_size("SAKER_COMM_DIRECT_BYTES", &p.direct_bytes);
  bool exchange = env_size("SAKER_COMM_EXCHANGE_BYTES", &p.exchange_bytes);
  if (direct && !exchange) p.exchange_bytes = 0;
  if (exchange && !direct) p.direct_bytes = 0;
  return p;
}

int stripes_for_node(int online_cpus, int ranks_here) {
  std::size_t forced = 0;
  if (env_size("SAKER_COMM_SHM_STRIPES", &forced)) {
    if (forced < 1 || forced > 16)
      throw Error(explain("SAKER_COMM_SHM_STRIPES=" + std::to_string(forced) + " is out of range",
                          "a large allreduce is cut into 1 to 16 stripes", "set a value from 1 to 16, or unset it"));
    return static_cast<int>(forced);
  }
  return std::clamp(online_cpus / std::max(1, ranks_here), 1, 4);
}

int stripe_threads(int stripes) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::clamp(cpus, 1, std::max(1, stripes));
}

}  // namespace saker::comm
