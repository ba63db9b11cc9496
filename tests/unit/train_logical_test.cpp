// saker-train's logical workers (issue 32 §2): the weights are the same bits whatever the
// number of ranks the L workers run on, the transport between them, and any resize on
// the way (a checkpoint written on 4 ranks resumed on 3, then 4 again).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/train/comm_reducer.hpp"
#include "launcher/train/trainer.hpp"
#include "tests/unit/train_test_support.hpp"

using namespace saker::train;
using saker::train::test::MemoryStore;
using saker::train::test::StopAfter;

namespace {

const Dataset& data() {
  static const Dataset d = make_synthetic(SyntheticSpec{.rows = 512, .features = 8, .classes = 3, .spread = 1.0, .seed = 4});
  return d;
}

TrainConfig config() {
  TrainConfig c = test::short_run({24, 16}, 36, 7);  // 36 rows: uneven over 4, 3, 5 and 7 workers
  c.logical_ranks = 4;
  return c;
}

struct Outcome {
  std::vector<TrainResult> results;  // by rank
  std::vector<std::string> errors;
};

// Trains on `world` ranks (threads; one node: shared memory, else TCP ring), each with
// its own store seeded with `from` (a replicated snapshot, as the checkpoint directory
// gives every rank). stop_at > 0: rank 0's stop flag rises after that many steps.
// hook(rank, step_sums_seen), when given, runs after each step's sum on every rank.
Outcome run_on(int world, bool one_node, TrainConfig cfg, const std::optional<Snapshot>& from,
               std::optional<Snapshot>* saved, int stop_at = 0) {
  Outcome out;
  out.results.resize(static_cast<std::size_t>(world));
  std::vector<MemoryStore> stores(static_cast<std::size_t>(world));
  for (auto& s : stores) s.latest = from;
  out.errors = test::run_ranks(world, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    CommReducer reducer(std::move(comm));
    std::atomic<int> stop{0};
    StopAfter stopper(reducer, &stop, r == 0 ? stop_at : 0);
    out.results[static_cast<std::size_t>(r)] = train(cfg, data(), stopper, &stores[static_cast<std::size_t>(r)], &stop);
  }, one_node);
  if (saved != nullptr) *saved = stores[0].latest;
  return out;
}

void check_clean(const Outcome& o) {
  for (const std::string& e : o.errors) CHECK(e == "");
}

std::string straight_hash() {
  SoloReducer solo;  // all 4 logical workers in one process
  return train(config(), data(), solo, nullptr, nullptr).weights_hash;
}

}  // namespace

TEST_CASE("4 logical workers end with the same weights on 1, 2, 3 and 4 ranks, on one node or several") {
  const std::string want = straight_hash();
  for (int world : {4, 3, 2}) {
    for (bool one_node : {true, false}) {
      INFO(world << " ranks" << (one_node ? " on one node (shared memory)" : " on a node each (TCP ring)"));
      const Outcome o = run_on(world, one_node, config(), std::nullopt, nullptr);
      check_clean(o);
      for (const TrainResult& r : o.results) {
        CHECK(r.weights_hash == want);
        CHECK(r.logical_ranks == 4);
      }
    }
  }
}

TEST_CASE("a run stopped on 4 ranks, resumed on 3, stopped again and finished on 4 ends bitwise as the uninterrupted run") {
  const std::string want = straight_hash();
  std::optional<Snapshot> snap;
  const Outcome first = run_on(4, false, config(), std::nullopt, &snap, 33);
  check_clean(first);
  REQUIRE(first.results[0].preempted);
  REQUIRE(snap);
  CHECK(snap->step == 34);
  CHECK(logical_ranks_of(snap->config) == 4);
  const Outcome second = run_on(3, true, config(), snap, &snap, 40);  // resumed at 34, stopped at 75
  check_clean(second);
  REQUIRE(second.results[1].preempted);
  CHECK(second.results[1].resumed_from == 34);
  CHECK(snap->step == 75);
  TrainConfig again = config();
  again.logical_ranks = 0;  // the default: the checkpoint's L, though 4 ranks run it now
  const Outcome last = run_on(4, false, again, snap, nullptr);
  check_clean(last);
  for (const TrainResult& r : last.results) {
    CHECK(r.resumed_from == 75);
    CHECK(r.logical_ranks == 4);
    CHECK(r.weights_hash == want);
  }
  // The test can fail: another L sums in another order and ends elsewhere.
  TrainConfig five = config();
  five.logical_ranks = 5;
  SoloReducer solo;
  CHECK(train(five, data(), solo, nullptr, nullptr).weights_hash != want);
}

TEST_CASE("the logical worker count is kept by a resume and bounds the world size") {
  std::optional<Snapshot> snap;
  TrainConfig cfg = config();
  cfg.logical_ranks = 0;  // the first world size: 2
  cfg.steps = 45;
  const Outcome first = run_on(2, true, cfg, std::nullopt, &snap);
  check_clean(first);
  REQUIRE(snap);
  CHECK(logical_ranks_of(snap->config) == 2);
  // 3 ranks cannot run 2 logical workers, and another explicit L is another run.
  const Outcome wider = run_on(3, true, config(), snap, nullptr);
  for (const std::string& e : wider.errors) CHECK_THAT(e, Catch::Contains("--logical-ranks 4") && Catch::Contains("2 logical workers"));
  TrainConfig grown = cfg;
  grown.logical_ranks = 0;
  const Outcome too_many = run_on(3, true, grown, snap, nullptr);
  for (const std::string& e : too_many.errors)
    CHECK_THAT(e, Catch::Contains("3 ranks for 2 logical workers") && Catch::Contains("at most 2 ranks"));
  // Records from before --logical-ranks: their world size was their L.
  CHECK(logical_ranks_of("{\"model\":\"mlp\",\"world_size\":3}") == 3);
  CHECK(logical_ranks_of("{\"model\":\"mlp\",\"world_size\":3,\"logical_ranks\":6}") == 6);
  CHECK(same_run("{\"a\":1,\"world_size\":3}", "{\"a\":1,\"world_size\":2,\"logical_ranks\":3}"));
  CHECK(same_run("{\"a\":1,\"world_size\":2,\"allreduce\":\"nccl\"}", "{\"a\":1,\"world_size\":2,\"logical_ranks\":2}"));
  CHECK_FALSE(same_run("{\"a\":1,\"world_size\":3}", "{\"a\":2,\"world_size\":3}"));
}

TEST_CASE("a resize notice stops every rank at the same step with a checkpoint and the preemption marker") {
  char dir_template[] = "/tmp/saker-train-resize-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, notice = dir + "/resize", marker = dir + "/marker";
  CHECK(resize_notice_size(notice) == -1);
  // A notice naming the world size the run already has is not one (saker-run's previous
  // notice, left behind): the run goes to the end.
  std::ofstream(notice) << "3\n";
  CHECK(resize_notice_size(notice) == 3);
  std::ofstream(notice + ".empty").flush();
  CHECK(resize_notice_size(notice + ".empty") == 0);  // there, but no number: still a notice
  std::ofstream(notice + ".junk") << "grow\n";
  CHECK(resize_notice_size(notice + ".junk") == 0);
  std::remove((notice + ".empty").c_str());
  std::remove((notice + ".junk").c_str());
  TrainConfig cfg = config();
  cfg.resize_notice = notice;
  cfg.preempt_marker = marker;
  const Outcome same = run_on(3, true, cfg, std::nullopt, nullptr);
  check_clean(same);
  for (const TrainResult& r : same.results) CHECK_FALSE(r.preempted);
  CHECK(access(marker.c_str(), F_OK) != 0);

  // Rank 2 alone sees the notice appear after its 20th step (as on a node where it shows
  // first): the sum of the votes stops all 4 ranks after the same step.
  std::remove(notice.c_str());
  std::vector<MemoryStore> stores(4);
  std::vector<TrainResult> results(4);
  const auto errors = test::run_ranks(4, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    CommReducer reducer(std::move(comm));
    std::atomic<int> never{0};
    class Notifier final : public Reducer {
     public:
      Notifier(Reducer& in, int rank, std::string path) : in_(in), rank_(rank), path_(std::move(path)) {}
      int rank() const override { return in_.rank(); }
      int size() const override { return in_.size(); }
      void allreduce_sum(std::span<float> d) override { in_.allreduce_sum(d); }
      void sum_logical(int l, std::span<float* const> p, std::size_t c, float* o) override {
        in_.sum_logical(l, p, c, o);
        if (++seen_ == 20 && rank_ == 2) std::ofstream(path_) << "3\n";
      }

     private:
      Reducer& in_;
      int rank_, seen_ = 0;
      std::string path_;
    } notifier(reducer, r, notice);
    results[static_cast<std::size_t>(r)] = train(cfg, data(), notifier, &stores[static_cast<std::size_t>(r)], &never);
  });
  for (const std::string& e : errors) CHECK(e == "");
  for (int r = 0; r < 4; ++r) {
    const TrainResult& res = results[static_cast<std::size_t>(r)];
    CHECK(res.preempted);
    CHECK(res.resized);
    CHECK(res.step == 21);
    CHECK(stores[static_cast<std::size_t>(r)].emergencies == 1);
  }
  std::ifstream m(marker);
  std::string step;
  m >> step;
  CHECK(step == "21");
  std::remove(notice.c_str());
  std::remove(marker.c_str());
  rmdir(dir.c_str());
}
