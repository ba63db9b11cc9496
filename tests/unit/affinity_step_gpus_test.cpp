#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "plugins/affinity/step_gpus.hpp"

using namespace saker::affinity;

TEST_CASE("affinity step GPUs: SLURM_STEP_GPUS is the truth, CUDA numbers follow it") {
  auto s = step_gpus_from_env("4,5,6,7", "4,5,6,7");
  CHECK(s.physical == std::vector<unsigned>{4, 5, 6, 7});
  CHECK(s.tokens == std::vector<std::string>{"4", "5", "6", "7"});
  // --gpus-per-task: CUDA_VISIBLE_DEVICES shows one GPU, the step still holds four.
  s = step_gpus_from_env("0-3", "2");
  CHECK(s.physical == std::vector<unsigned>{0, 1, 2, 3});
  CHECK(s.tokens == std::vector<std::string>{"0", "1", "2", "3"});
}

TEST_CASE("affinity step GPUs: ConstrainDevices renumbering is detected or forced") {
  auto s = step_gpus_from_env("4,5,6,7", "0,1,2,3");
  CHECK(s.physical == std::vector<unsigned>{4, 5, 6, 7});
  CHECK(s.tokens == std::vector<std::string>{"0", "1", "2", "3"});
  s = step_gpus_from_env("4,6", "1");  // one task's view, renumbered
  CHECK(s.tokens == std::vector<std::string>{"0", "1"});
  // Indexes that are both valid node indexes and positions: only configuration can tell.
  s = step_gpus_from_env("1,2", "1", Renumbering::yes);
  CHECK(s.tokens == std::vector<std::string>{"0", "1"});
  s = step_gpus_from_env("1,2", "1", Renumbering::detect);
  CHECK(s.tokens == std::vector<std::string>{"1", "2"});
}

TEST_CASE("affinity step GPUs: fall back to CUDA_VISIBLE_DEVICES, reject UUIDs") {
  CHECK(step_gpus_from_env(nullptr, "1,3").physical == std::vector<unsigned>{1, 3});
  CHECK(step_gpus_from_env(nullptr, nullptr).physical.empty());
  CHECK(step_gpus_from_env("", "").physical.empty());
  CHECK_THROWS_WITH(step_gpus_from_env(nullptr, "GPU-8f3c"), Catch::Contains("UUIDs"));
  // A non-numeric visible list next to SLURM_STEP_GPUS is simply rewritten.
  CHECK(step_gpus_from_env("0,1", "GPU-8f3c").tokens == std::vector<std::string>{"0", "1"});
}
