#include "launcher/comm/tuning.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "common/error.hpp"

namespace saker::comm {
namespace {

// Exchanges up to this size busy-poll when the machine has a core for every spinning
// rank: the 4 KiB allreduce is dominated by wake-ups otherwise. Past it, or when ranks
// outnumber cores, a spinning rank only delays the copies of the rank it waits for.
constexpr std::size_t kBusyPollSpare = 8u << 20;
constexpr std::size_t kBusyPollCrowded = 256u << 10;

bool env_size(const char* name, std::size_t* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || *v == '-')
    throw Error(explain(std::string(name) + "='" + v + "' is not a byte count", "it must be a whole number >= 0",
                        "fix or unset the variable"));
  *out = static_cast<std::size_t>(x);
  return true;
}

}  // namespace

double TimedChoice::Recent::best() const {
  double m = seconds_per_byte[0];
  for (double v : seconds_per_byte) m = v > 0 && (m == 0 || v < m) ? v : m;
  return m;
}

bool TimedChoice::second(std::size_t bytes) const {
  const Stats& s = by_size_[static_cast<std::size_t>(std::bit_width(bytes))];
  if (s.calls < 9) return s.calls != 0 && s.calls % 2 == 0;  // a cold first call, then each in turn, four times
  bool best = s.mode[1].best() < s.mode[0].best();
  return s.calls % 32 == 0 ? !best : best;  // look at the other one now and then
}

void TimedChoice::record(std::size_t bytes, bool second, double seconds) {
  Stats& s = by_size_[static_cast<std::size_t>(std::bit_width(bytes))];
  Recent& r = s.mode[second ? 1 : 0];
  if (s.calls++ == 0) return;  // first touches and page faults say nothing about the choice
  r.seconds_per_byte[r.next++ % r.seconds_per_byte.size()] = seconds / static_cast<double>(bytes);
}

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

LinkPlan plan_links(int online, int ranks_here) {
  LinkPlan p;
  ranks_here = std::max(1, ranks_here);
  // Whether ranks are bound does not matter: one bound to a core spins only on its own.
  p.busy_poll_bytes = online >= ranks_here ? kBusyPollSpare : kBusyPollCrowded;
  std::size_t v = 0;
  if (env_size("SAKER_COMM_SEND_THREAD", &v)) p.send_thread = v != 0 ? 1 : 0;
  env_size("SAKER_COMM_BUSY_POLL_BYTES", &p.busy_poll_bytes);
  bool direct = env_size("SAKER_COMM_DIRECT_BYTES", &p.direct_bytes);
  bool exchange = env_size("SAKER_COMM_EXCHANGE_BYTES", &p.exchange_bytes);
  if (direct && !exchange) p.exchange_bytes = 0;
  if (exchange && !direct) p.direct_bytes = 0;
  return p;
}

}  // namespace saker::comm
