// Decision time of the compiled policy with 10,000 datasets and 1,000 grants (target:
// <= 10 us per job), against the peer a hand-written job_submit script amounts to: for
// every declared dataset, scan every dataset entry and every grant linearly. Both are
// measured in this run on the same generated policy.
#include <fnmatch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "saker/policy.hpp"

using namespace saker::policy;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kDatasets = 10000, kGrants = 1000, kZones = 4;

std::string generate() {
  std::string y = "version: 1\nzones:\n";
  for (int z = 0; z < kZones; ++z) y += "  - {name: z" + std::to_string(z) + ", country: C" + std::string(1, char('A' + z)) + "}\n";
  y += "partitions:\n";
  for (int z = 0; z < kZones; ++z)
    y += "  - {name: p" + std::to_string(z) + ", zone: z" + std::to_string(z) + ", nodes: \"n" + std::to_string(z) +
         "[000-255]\", gpus_per_node: 8" + (z == 0 ? ", default: true" : "") + "}\n";
  y += "storage:\n";
  for (int z = 0; z < kZones; ++z)
    y += "  - {name: s" + std::to_string(z) + ", zone: z" + std::to_string(z) + ", mounts: [/fs" + std::to_string(z) +
         "], features: [fs" + std::to_string(z) + "]}\n";
  y += "datasets:\n";
  for (int d = 0; d < kDatasets; ++d) {
    const int z = d % kZones;
    y += "  - {name: ds" + std::to_string(d) + ", versions: [v1, v2], classification: " +
         (d % 3 == 0 ? "restricted" : "internal") + ", zones: [z" + std::to_string(z) + "], replicas: [s" +
         std::to_string(z) + "]}\n";
  }
  y += "grants:\n";
  for (int g = 0; g < kGrants; ++g)
    y += "  - {accounts: [acct" + std::to_string(g) + "], datasets: [\"ds" + std::to_string(g) + "*\"]}\n";
  return y;
}

// The peer: linear scans, as a Lua/shell job_submit script does them.
struct Linear {
  std::vector<std::string> names;
  std::vector<int> zone;
  std::vector<bool> restricted;
  std::vector<std::pair<std::string, std::string>> grants;  // account, glob
  bool allowed(const std::string& account, const std::vector<DatasetRef>& ds, int part_zone) const {
    for (const auto& r : ds) {
      std::size_t i = 0;
      while (i < names.size() && names[i] != r.name) ++i;
      if (i == names.size() || zone[i] != part_zone) return false;
      if (!restricted[i]) continue;
      bool ok = false;
      for (const auto& [a, glob] : grants) ok = ok || (a == account && fnmatch(glob.c_str(), r.name.c_str(), 0) == 0);
      if (!ok) return false;
    }
    return true;
  }
};

}  // namespace

int main() {
  const std::string yaml = generate();
  auto t0 = Clock::now();
  const auto policy = Policy::load_string(yaml, "bench");
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  Linear linear;
  for (int d = 0; d < kDatasets; ++d) {
    linear.names.push_back("ds" + std::to_string(d));
    linear.zone.push_back(d % kZones);
    linear.restricted.push_back(d % 3 == 0);
  }
  for (int g = 0; g < kGrants; ++g) linear.grants.emplace_back("acct" + std::to_string(g), "ds" + std::to_string(g) + "*");

  // Jobs: 3 datasets each, spread over the index (late entries are the linear scan's worst case).
  std::vector<JobRequest> jobs;
  for (int j = 0; j < 1000; ++j) {
    JobRequest q;
    q.user = "user" + std::to_string(j);
    q.account = "acct" + std::to_string(j % kGrants);
    q.partition = j % 2 == 0 ? "p0" : "";
    const int base = (j * 37) % (kDatasets - 8) / 4 * 4;
    q.datasets = parse_dataset_list("ds" + std::to_string(base) + "@v1,ds" + std::to_string(base + 4) + ",ds" +
                                    std::to_string(base + 8));
    q.gpus = 8;
    q.gpus_per_task = 1;
    jobs.push_back(std::move(q));
  }
  constexpr int kRounds = 200;
  std::size_t denied = 0;
  t0 = Clock::now();
  for (int r = 0; r < kRounds; ++r)
    for (const auto& q : jobs) denied += policy->evaluate(q).kind == DecisionKind::deny ? 1 : 0;
  const double saker_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / (kRounds * jobs.size());
  std::size_t peer_denied = 0;
  t0 = Clock::now();
  const int peer_rounds = 5;
  for (int r = 0; r < peer_rounds; ++r)
    for (const auto& q : jobs) peer_denied += linear.allowed(q.account, q.datasets, 0) ? 0 : 1;
  const double peer_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / (peer_rounds * jobs.size());

  std::printf("policy: %d datasets, %d grants, %d zones; load+compile %.1f ms\n", kDatasets, kGrants, kZones, load_ms);
  std::printf("decision (Saker compiled engine): %.2f us/job   [target <= 10 us: %s]  (%zu denials)\n", saker_us,
              saker_us <= 10.0 ? "MET" : "MISSED", denied / kRounds);
  std::printf("peer (linear scans, as a hand-written job_submit script): %.2f us/job  (%zu denials)\n", peer_us,
              peer_denied / peer_rounds);
  std::printf("ratio peer/Saker: %.1fx\n", peer_us / saker_us);
  return saker_us <= 10.0 ? 0 : 1;
}
