// Which CUDA device each rank's NCCL drives: the rule must agree with Saker's SPANK
// plugin (own GPU first in CUDA_VISIBLE_DEVICES) and with plain Slurm (every rank of a
// node sees the same list), or two ranks land on one GPU and NCCL refuses to start.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/comm/nccl.hpp"
#include "tests/unit/comm_test_support.hpp"

using namespace saker::comm;

TEST_CASE("nccl device: first visible device of CUDA_VISIBLE_DEVICES") {
  CHECK(first_visible_device(nullptr).empty());
  CHECK(first_visible_device("").empty());
  CHECK(first_visible_device("3,0,1,2") == "3");
  CHECK(first_visible_device("GPU-8c1e,GPU-77aa") == "GPU-8c1e");
  CHECK(first_visible_device("5") == "5");
}

TEST_CASE("nccl device: the SPANK plugin's lists put each rank's own GPU first") {
  // spank_saker.so on a 4-GPU node: rank r sees "r,others...".
  CHECK(own_gpu_first({"0", "1", "2", "3"}));
  // --gpus-per-task=1 without the plugin: each rank sees only its own.
  CHECK(own_gpu_first({"2", "3"}));
  // Plain --gres=gpu:4: every rank sees "0,1,2,3".
  CHECK_FALSE(own_gpu_first({"0", "0", "0", "0"}));
  // saker-run --local on a workstation: nothing set.
  CHECK_FALSE(own_gpu_first({"", ""}));
  CHECK_FALSE(own_gpu_first({"1", ""}));
  CHECK_FALSE(own_gpu_first({}));
}

TEST_CASE("nccl device: own GPU first -> device 0, shared list -> the local rank's") {
  CHECK(choose_cuda_device(4, 3, 4, true, "n1") == 0);
  CHECK(choose_cuda_device(1, 1, 2, true, "n1") == 0);
  CHECK(choose_cuda_device(4, 3, 4, false, "n1") == 3);
  CHECK(choose_cuda_device(8, 1, 2, false, "n1") == 1);
  CHECK(choose_cuda_device(1, 0, 1, false, "n1") == 0);
}

TEST_CASE("nccl device: no device, or ranks that would share one, are refused by name") {
  CHECK_THROWS_WITH(choose_cuda_device(0, 0, 1, false, "gpu-node-7"),
                    Catch::Contains("gpu-node-7") && Catch::Contains("none is visible"));
  CHECK_THROWS_WITH(choose_cuda_device(2, 2, 3, false, "gpu-node-7"),
                    Catch::Contains("3 ranks on gpu-node-7 share 2 visible CUDA device(s)") &&
                        Catch::Contains("at most 2 rank(s) per node"));
}

// Two ranks of one node with at most one GPU between them (this machine, or a one-GPU
// box): NCCL cannot serve them. Every rank must hear the same refusal, a second call
// repeats it without another exchange, and host collectives go on working (the torch
// backend falls back to them; a communicator marked broken would fail them all).
TEST_CASE("nccl device: a refusal reaches every rank alike and leaves the communicator usable") {
  std::vector<std::string> refusals(2);
  test::run_ranks(2, [&](Communicator& c, test::Failures& f) {
    std::string first, second;
    try {
      c.nccl_device();
    } catch (const std::exception& e) {
      first = e.what();
    }
    if (first.empty()) return;  // a GPU for each rank: NCCL started, nothing to refuse here
    try {
      float dummy = 0;
      c.allreduce_device(&dummy, 1, DataType::f32, ReduceOp::sum, nullptr);
    } catch (const std::exception& e) {
      second = e.what();
    }
    if (second != first) f.add("rank " + std::to_string(c.rank()) + ": the second call said '" + second + "'");
    float x = 1.0f;
    c.allreduce(&x, 1, DataType::f32);
    if (x != 2.0f) f.add("rank " + std::to_string(c.rank()) + ": host allreduce after the refusal gave " +
                         std::to_string(x));
    refusals[static_cast<std::size_t>(c.rank())] = first;
  });
  CHECK(refusals[0] == refusals[1]);
  if (!refusals[0].empty()) {
    INFO(refusals[0]);
    CHECK((refusals[0].find("sees none") != std::string::npos || refusals[0].find("share") != std::string::npos ||
           refusals[0].find("built without NCCL") != std::string::npos));
  }
}
