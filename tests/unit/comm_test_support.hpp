// Runs N ranks as threads over the in-memory store. Catch's macros are not
// thread-safe, so ranks record failures and the test thread checks them.
#pragma once

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "saker/comm.hpp"

namespace saker::comm::test {

struct Failures {
  std::mutex mu;
  std::vector<std::string> items;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    if (items.size() < 20) items.push_back(s);
  }
  std::string text() {
    std::string out;
    for (auto& s : items) out += s + "\n";
    return out;
  }
};

// A fixed job key for tests (32 bytes): every rank of a test proves it.
inline std::string test_key() { return std::string(32, '\x5a'); }

// "same", or where two results first differ (Catch would print megabytes of both).
inline std::string difference(const std::vector<char>& got, const std::vector<char>& want) {
  if (got == want) return "same";
  if (got.size() != want.size()) return std::to_string(got.size()) + " bytes, not " + std::to_string(want.size());
  auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
  return "byte " + std::to_string(at) + " differs";
}

inline Options quick_options() {
  Options o;
  o.timeout = std::chrono::seconds(10);
  o.fusion = false;
  o.ignore_environment = true;
  o.job_key = test_key();
  return o;
}

// nodes[r] is rank r's node identity (empty: all on one node). f(comm, failures).
// before_create(r), if given, runs on rank r's thread before its communicator exists
// (e.g. to pin that thread: a communicator sizes some of its work by the CPUs it may use).
template <class F>
void run_ranks(int n, F f, Options o = quick_options(), std::vector<std::string> nodes = {},
               std::function<void(int)> before_create = {}) {
  auto store = make_memory_store();
  Failures failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Placement p;
        p.rank = r;
        p.size = n;
        p.node = nodes.empty() ? "node0" : nodes[static_cast<std::size_t>(r)];
        p.host = "host-" + p.node;
        if (before_create) before_create(r);
        auto comm = Communicator::create(store, p, o);
        f(*comm, failures);
      } catch (const std::exception& e) {
        failures.add("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!failures.items.empty()) throw std::runtime_error(failures.text());
}

}  // namespace saker::comm::test
