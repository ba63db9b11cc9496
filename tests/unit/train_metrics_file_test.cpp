// saker-train's metrics file (--metrics-file): one "step=S name=value ..." line per
// progress line and at the last step, appended across runs, and the final eval_loss is
// the loss the run reports over the whole dataset.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "launcher/train/metrics_file.hpp"
#include "launcher/train/trainer.hpp"
#include "tests/unit/ckpt_test_util.hpp"
#include "tests/unit/train_test_support.hpp"

using namespace saker::train;

namespace {

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("saker-train appends metrics lines at every progress line and at the last step") {
  saker::ckpt::testing::TempDir dir;
  const Dataset data = make_synthetic(SyntheticSpec{.rows = 256, .features = 8, .classes = 3, .spread = 1.0, .seed = 4});
  TrainConfig c = test::short_run({16}, 32, 3);
  c.steps = 50;
  c.log_every = 20;
  c.metrics_file = (dir / "metrics").string();
  SoloReducer solo;
  test::MemoryStore store;
  const TrainResult r = train(c, data, solo, &store, nullptr);
  auto lines = lines_of(dir / "metrics");
  REQUIRE(lines.size() == 3);  // steps 20, 40 and the last, 50
  CHECK(lines[0].rfind("step=20 loss=", 0) == 0);
  CHECK(lines[2].rfind("step=50 loss=", 0) == 0);
  for (const char* key : {" accuracy=", " eval_loss=", " eval_accuracy="}) CHECK(lines[2].find(key) != std::string::npos);
  char expected[64];
  std::snprintf(expected, sizeof expected, " eval_loss=%.9g ", r.loss);
  CHECK(lines[2].find(expected) != std::string::npos);

  // A run resumed with a larger budget appends after the first run's lines.
  c.steps = 80;
  train(c, data, solo, &store, nullptr);
  lines = lines_of(dir / "metrics");
  REQUIRE(lines.size() == 5);
  CHECK(lines[3].rfind("step=60 ", 0) == 0);
  CHECK(lines[4].rfind("step=80 ", 0) == 0);

  CHECK_THROWS_WITH(MetricsFile("/nonexistent/dir/metrics"), Catch::Contains("cannot open the metrics file"));
}
