// The training loop: it learns, and a run interrupted at any point and resumed from
// its snapshot ends with the same weights, bit for bit.
#include <catch2/catch.hpp>

#include <atomic>

#include "common/error.hpp"
#include "launcher/train/trainer.hpp"
#include "tests/unit/train_test_support.hpp"

using namespace saker::train;
using saker::train::test::MemoryStore;
using saker::train::test::StopAfter;

namespace {

TrainConfig small_config() { return test::short_run({16}, 32, 3); }

const Dataset& data() {
  static const Dataset d = make_synthetic(SyntheticSpec{.rows = 512, .features = 8, .classes = 3, .spread = 1.0, .seed = 4});
  return d;
}

}  // namespace

TEST_CASE("training learns the synthetic problem and is deterministic") {
  SoloReducer solo;
  const TrainResult a = train(small_config(), data(), solo, nullptr, nullptr);
  const TrainResult b = train(small_config(), data(), solo, nullptr, nullptr);
  CHECK(a.step == 120);
  CHECK(a.accuracy > 0.8);
  CHECK(a.weights_hash.size() == 32);
  CHECK(a.weights_hash == b.weights_hash);
  TrainConfig other = small_config();
  other.seed = 4;
  CHECK(train(other, data(), solo, nullptr, nullptr).weights_hash != a.weights_hash);
}

TEST_CASE("a crash after a periodic checkpoint resumes to the same weights") {
  for (const char* kind : {"adam", "sgd"}) {
    TrainConfig c = small_config();
    c.optimizer.kind = kind;
    SoloReducer solo;
    const TrainResult straight = train(c, data(), solo, nullptr, nullptr);

    MemoryStore store;
    TrainConfig first = c;
    first.steps = 70;  // the final step is saved too
    train(first, data(), solo, &store, nullptr);
    REQUIRE(store.latest);
    CHECK(store.latest->step == 70);
    // A crash after step 70 loses steps 41..70: the store holds step 40 only, as if
    // the run had stopped right after that checkpoint.
    store.latest.reset();
    first.steps = 40;
    train(first, data(), solo, &store, nullptr);
    REQUIRE(store.latest);
    CHECK(store.latest->step == 40);
    const TrainResult resumed = train(c, data(), solo, &store, nullptr);
    INFO(kind);
    CHECK(resumed.resumed_from == 40);
    CHECK(resumed.weights_hash == straight.weights_hash);
  }
}

TEST_CASE("a stop signal takes an emergency checkpoint and the resumed run ends the same") {
  SoloReducer solo;
  const TrainResult straight = train(small_config(), data(), solo, nullptr, nullptr);
  MemoryStore store;
  std::atomic<int> stop{0};
  StopAfter stopper(solo, &stop, 57);
  const TrainResult stopped = train(small_config(), data(), stopper, &store, &stop);
  CHECK(stopped.preempted);
  CHECK(stopped.step == 58);
  CHECK(store.emergencies == 1);
  CHECK(store.latest->step == 58);
  const TrainResult resumed = train(small_config(), data(), solo, &store, nullptr);
  CHECK(resumed.resumed_from == 58);
  CHECK(resumed.weights_hash == straight.weights_hash);
}

TEST_CASE("a checkpoint of another run is refused") {
  SoloReducer solo;
  MemoryStore store;
  TrainConfig first = small_config();
  first.steps = 45;
  train(first, data(), solo, &store, nullptr);
  TrainConfig other = small_config();
  other.batch = 16;
  CHECK_THROWS_AS(train(other, data(), solo, &store, nullptr), saker::Error);
  std::atomic<int> stop{1};
  CHECK_THROWS_AS(train(small_config(), data(), solo, nullptr, &stop), saker::Error);
}
