// --device: the rule that picks NCCL on the GPU or saker's host ring, the same on every
// rank, and the clear refusal of --device gpu where the GPU path cannot run. The
// threaded cases run the real agreement (one allgather over libsaker_comm) with probes
// given by the test, so they hold on a machine with or without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "config.h"
#include "common/error.hpp"
#include "launcher/train/device.hpp"
#include "launcher/train/reducer_choice.hpp"
#include "tests/unit/train_test_support.hpp"

using namespace saker::train;

namespace {

GpuProbe has_gpu() { return {true, true, ""}; }
GpuProbe no_device() { return {true, false, "no CUDA device visible: cudaGetDeviceCount: no CUDA-capable device is detected"}; }
GpuProbe no_nccl() { return {false, false, "this saker-train was built without NCCL"}; }

}  // namespace

TEST_CASE("device: --device accepts auto, cpu and gpu only") {
  CHECK(parse_device("auto") == Device::automatic);
  CHECK(parse_device("cpu") == Device::cpu);
  CHECK(parse_device("gpu") == Device::gpu);
  CHECK(std::string(name_of(Device::automatic)) == "auto");
  CHECK_THROWS_WITH(parse_device("cuda"), Catch::Contains("'cuda'") && Catch::Contains("auto, cpu and gpu"));
  CHECK_THROWS_AS(parse_device("GPU"), saker::Error);
}

TEST_CASE("device: auto takes the GPU only when every rank can") {
  const DeviceDecision all = decide_device(Device::automatic, {has_gpu(), has_gpu()}, {"n1", "n2"});
  CHECK(all.gpu);
  CHECK_THAT(all.reason, Catch::Contains("every rank sees a CUDA device"));

  const DeviceDecision alone = decide_device(Device::automatic, {no_device()}, {"n1"});
  CHECK_FALSE(alone.gpu);
  CHECK(alone.reason == no_device().why_not);  // one rank: no "rank 0 on" prefix

  const DeviceDecision one_lacks = decide_device(Device::automatic, {has_gpu(), has_gpu(), no_device()}, {"n1", "n2", "n3"});
  CHECK_FALSE(one_lacks.gpu);
  CHECK_THAT(one_lacks.reason, Catch::StartsWith("rank 2 on n3: no CUDA device visible"));

  CHECK_FALSE(decide_device(Device::automatic, {no_nccl(), no_nccl()}, {"n1", "n2"}).gpu);
}

TEST_CASE("device: cpu never touches the GPU") {
  const DeviceDecision d = decide_device(Device::cpu, {has_gpu(), has_gpu()}, {"n1", "n2"});
  CHECK_FALSE(d.gpu);
  CHECK(d.reason == "--device cpu");
}

TEST_CASE("device: gpu without one fails with the thing, the reason and the fix") {
  CHECK(decide_device(Device::gpu, {has_gpu()}, {"n1"}).gpu);
  // Its own type: saker-train exits 78 on it, which saker-run does not retry.
  CHECK_THROWS_AS(decide_device(Device::gpu, {no_device()}, {"n1"}), DeviceRefused);
  CHECK_THROWS_WITH(decide_device(Device::gpu, {no_device()}, {"n1"}),
                    Catch::Contains("--device gpu: this saker-train cannot allreduce with NCCL on a GPU") &&
                        Catch::Contains("no CUDA-capable device is detected") && Catch::Contains("--gpus-per-task=1") &&
                        Catch::Contains("--device auto or cpu"));
  CHECK_THROWS_WITH(decide_device(Device::gpu, {has_gpu(), no_device()}, {"n1", "gpu-node-2"}),
                    Catch::Contains("rank 1 on gpu-node-2 cannot allreduce"));
  CHECK_THROWS_WITH(decide_device(Device::gpu, {no_nccl()}, {"n1"}),
                    Catch::Contains("built without NCCL") && Catch::Contains("configure --with-nccl"));
}

TEST_CASE("device: this process's probe gives a reason whenever the GPU path is out") {
  const GpuProbe p = probe_gpu();
#ifdef SAKER_HAVE_NCCL
  CHECK(p.built);
#else
  CHECK_FALSE(p.built);
  CHECK_FALSE(p.usable);
#endif
  CHECK(p.usable == p.why_not.empty());
  if (p.usable) return;  // a GPU machine: tests/unit/train_gpu_check covers it
  // No GPU here: auto falls back to the host (one rank keeps its gradients), gpu refuses.
  unsetenv("WORLD_SIZE");
  unsetenv("SAKER_WORLD_SIZE");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_NTASKS");
  const ReducerChoice c = make_reducer(Device::automatic);
  CHECK_FALSE(c.decision.gpu);
  CHECK(c.reducer->size() == 1);
  CHECK_THAT(c.line, Catch::StartsWith("saker-train: one rank: gradients stay in host memory") &&
                         Catch::Contains(p.why_not));
  CHECK_THROWS_WITH(make_reducer(Device::gpu), Catch::Contains("--device gpu") && Catch::Contains(p.why_not));
}

TEST_CASE("device: ranks agree on one path, and the refusal is the same on every rank") {
  const std::vector<GpuProbe> probes = {has_gpu(), no_device()};
  std::vector<std::string> lines(2);
  std::vector<float> sums(2);
  auto errors = test::run_ranks(2, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    ReducerChoice c = reducer_over(std::move(comm), Device::automatic, probes[static_cast<std::size_t>(r)]);
    lines[static_cast<std::size_t>(r)] = c.line;
    float x = static_cast<float>(r + 1);
    c.reducer->allreduce_sum(std::span<float>(&x, 1));
    sums[static_cast<std::size_t>(r)] = x;
  });
  CHECK(errors == std::vector<std::string>(2));
  for (const std::string& line : lines) {
    CHECK(line == "saker-train: gradients allreduced over saker's host ring (rank 1 on host-node1: " +
                      no_device().why_not + ")");
  }
  CHECK(sums == std::vector<float>{3.0f, 3.0f});

  errors = test::run_ranks(2, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    reducer_over(std::move(comm), Device::gpu, probes[static_cast<std::size_t>(r)]);
  });
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("--device gpu: rank 1 on host-node1 cannot allreduce"));
}

// Issue 31, item 1: a CPU-only machine must not read "cudaGetDeviceCount: CUDA driver version
// is insufficient for CUDA runtime version" on every run (it reads like a broken install).
TEST_CASE("device: without the NVIDIA driver the reason is plain words, with no CUDA error text") {
  const GpuProbe none = interpret_cuda_probe(false, 0, "CUDA driver version is insufficient for CUDA runtime version", false);
  CHECK(none.built);
  CHECK_FALSE(none.usable);
  CHECK(none.why_not == "no NVIDIA GPU on this machine");
  // The driver is there but CUDA fails: something is wrong, and CUDA's words say what.
  const GpuProbe broken = interpret_cuda_probe(false, 0, "CUDA driver version is insufficient for CUDA runtime version", true);
  CHECK_FALSE(broken.usable);
  CHECK_THAT(broken.why_not, Catch::Contains("cudaGetDeviceCount: CUDA driver version is insufficient"));
  CHECK(interpret_cuda_probe(true, 2, "", true).usable);
  CHECK_THAT(interpret_cuda_probe(true, 0, "", true).why_not, Catch::Contains("found 0"));
}

TEST_CASE("device: on this machine, no CUDA message unless a GPU driver is there, and none for --device cpu") {
  const GpuProbe cpu = probe_gpu_for(Device::cpu);
  CHECK_FALSE(cpu.usable);
  CHECK(cpu.why_not == "--device cpu");
  const GpuProbe p = probe_gpu();
  if (p.usable || nvidia_driver_present()) return;  // a GPU machine: its CUDA words may matter
  CHECK_THAT(p.why_not, !Catch::Contains("cuda", Catch::CaseSensitive::No));
  unsetenv("WORLD_SIZE");
  unsetenv("SAKER_WORLD_SIZE");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_NTASKS");
  for (Device d : {Device::automatic, Device::cpu}) {
    const ReducerChoice c = make_reducer(d);
    CHECK_THAT(c.line, !Catch::Contains("cuda", Catch::CaseSensitive::No));
  }
}
