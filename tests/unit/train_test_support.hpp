// Helpers shared by saker-train's tests: snapshots kept in memory (standing in for the
// checkpoint directory), a "signal" raised after a given number of allreduces, and
// ranks run as threads, each with its own communicator over one in-memory store.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/train/trainer.hpp"
#include "saker/comm.hpp"

namespace saker::train::test {

// A short run that checkpoints every 40 of its 120 steps (three chances to resume).
inline TrainConfig short_run(std::vector<int> hidden, int batch, std::uint64_t seed) {
  TrainConfig c;
  c.hidden = std::move(hidden);
  c.batch = batch;
  c.steps = 120;
  c.seed = seed;
  c.ckpt_every = 40;
  c.log_every = 1000;
  c.optimizer.lr = 0.01;
  return c;
}

class MemoryStore final : public SnapshotStore {
 public:
  void save(const Snapshot& s, bool emergency) override {
    latest = s;
    ++saves;
    emergencies += emergency ? 1 : 0;
  }
  std::optional<Snapshot> load_latest(const std::string&) override { return latest; }
  std::string describe() const override { return "memory"; }
  std::optional<Snapshot> latest;
  int saves = 0, emergencies = 0;
};

// Forwards to `inner` and raises *flag once it has seen `at` steps' gradient sums, as a
// signal would: the flag lands in the NEXT step's sum.
class StopAfter final : public Reducer {
 public:
  StopAfter(Reducer& inner, std::atomic<int>* flag, int at) : inner_(inner), flag_(flag), at_(at) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void allreduce_sum(std::span<float> data) override { inner_.allreduce_sum(data); }
  void sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) override {
    inner_.sum_logical(logical, parts, count, out);
    if (++calls_ == at_) flag_->store(1);
  }

 private:
  Reducer& inner_;
  std::atomic<int>* flag_;
  int at_, calls_ = 0;
};

// Runs f(rank, communicator) for ranks 0..n-1 as threads; rank r's node is "node<r>"
// (with one_node: "node0", so local ranks count 0..n-1 as for GPUs of one machine) and
// its host "host-" + node. Returns each rank's error text ("" when it returned).
template <class F>
std::vector<std::string> run_ranks(int n, F f, bool one_node = false) {
  comm::Options o;
  o.timeout = std::chrono::seconds(20);
  o.fusion = false;
  o.ignore_environment = true;
  o.job_key = std::string(32, '\x5a');  // a fixed job key: every rank proves it
  auto store = comm::make_memory_store();
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const std::string node = "node" + std::to_string(one_node ? 0 : r);
        f(r, comm::Communicator::create(store, comm::Placement{r, n, node, "host-" + node, -1}, o));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        if (errors[static_cast<std::size_t>(r)].empty()) errors[static_cast<std::size_t>(r)] = "(empty error)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace saker::train::test
