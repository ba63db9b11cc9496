// saker-train's GPU path end to end: exits 77 (automake's SKIP) where no CUDA device is
// visible. Otherwise ranks run as threads, one GPU each (two ranks on two or more GPUs,
// one rank on one GPU: NCCL refuses two ranks on one device), and it checks that
//   - --device gpu really takes NCCL, and every rank ends with the same weights;
//   - the same seed and world size give the same hash run after run;
//   - a run that "crashes" after a periodic checkpoint and resumes, and one stopped by a
//     signal (emergency checkpoint) and resumed, both end with the uninterrupted hash;
//   - the hash equals the host ring's, and a GPU run's checkpoint resumes there: the
//     gradients are summed in saker's canonical order on both paths (issue 32 §2).
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "config.h"
#include "launcher/train/device.hpp"
#include "launcher/train/reducer_choice.hpp"
#include "tests/unit/train_test_support.hpp"
#ifdef SAKER_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

using namespace saker::train;

#ifdef SAKER_HAVE_NCCL
namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failures += ok ? 0 : 1;
}

TrainConfig config() { return test::short_run({32, 32}, 64, 11); }

const Dataset& data() {
  static const Dataset d = make_synthetic(SyntheticSpec{.rows = 1024, .features = 16, .classes = 4, .spread = 1.5, .seed = 5});
  return d;
}

struct Run {
  std::vector<std::string> hashes;  // per rank
  std::vector<bool> on_gpu;
  std::vector<std::string> errors;
  bool preempted = false;
};

// One training run over `ranks` threads. stores[r] (may be empty) keeps rank r's
// snapshots across runs; stop_at > 0 raises rank 0's stop flag after that many allreduces.
Run train_ranks(int ranks, Device device, TrainConfig cfg, std::vector<test::MemoryStore>* stores, int stop_at = 0) {
  Run run;
  run.hashes.resize(static_cast<std::size_t>(ranks));
  run.on_gpu.resize(static_cast<std::size_t>(ranks));
  std::vector<int> preempted(static_cast<std::size_t>(ranks));
  run.errors = test::run_ranks(ranks, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    const auto i = static_cast<std::size_t>(r);
    ReducerChoice choice = reducer_over(std::move(comm), device, probe_gpu());
    if (r == 0) std::printf("  %s\n", choice.line.c_str());
    run.on_gpu[i] = choice.decision.gpu;
    TrainConfig c = cfg;
    std::atomic<int> stop{0};
    test::StopAfter stopper(*choice.reducer, &stop, r == 0 ? stop_at : 0);
    const TrainResult res = train(c, data(), stopper, stores != nullptr ? &(*stores)[i] : nullptr, &stop);
    run.hashes[i] = res.weights_hash;
    preempted[i] = res.preempted ? 1 : 0;
  }, /*one_node=*/true);  // local ranks 0 and 1 drive GPUs 0 and 1
  run.preempted = preempted[0] != 0;
  return run;
}

bool clean(const Run& r) {
  for (const std::string& e : r.errors)
    if (!e.empty()) {
      std::printf("  error: %s\n", e.c_str());
      return false;
    }
  return true;
}

bool same_everywhere(const Run& r) {
  for (const std::string& h : r.hashes)
    if (h != r.hashes[0] || h.size() != 32) return false;
  return true;
}

int run_checks() {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  const int ranks = devices >= 2 ? 2 : 1;
  std::printf("saker-train GPU path: %d rank(s) on %d visible GPU(s)\n", ranks, devices);

  const Run straight = train_ranks(ranks, Device::gpu, config(), nullptr);
  if (!clean(straight)) return 1;
  expect(straight.on_gpu[0], "--device gpu allreduces with NCCL");
  expect(same_everywhere(straight), "every rank ends with the same weights (" + straight.hashes[0] + ")");
  const Run again = train_ranks(ranks, Device::gpu, config(), nullptr);
  expect(clean(again) && again.hashes == straight.hashes, "same seed and world size: same hash again");

  // "Crash" after step 70: a run that ends saves its final step, so the crash is what
  // is left of a run stopped right after the periodic checkpoint of step 40 (as the
  // trainer's unit test does it); the resumed run redoes steps 41..120.
  std::vector<test::MemoryStore> stores(static_cast<std::size_t>(ranks));
  TrainConfig first = config();
  first.steps = 70;
  expect(clean(train_ranks(ranks, Device::gpu, first, &stores)) && stores[0].latest && stores[0].latest->step == 70,
         "a run that ends saves its final step (70)");
  for (test::MemoryStore& s : stores) s.latest.reset();
  first.steps = 40;
  expect(clean(train_ranks(ranks, Device::gpu, first, &stores)) && stores[0].latest && stores[0].latest->step == 40,
         "periodic checkpoint at step 40 before the crash");
  const Run resumed = train_ranks(ranks, Device::gpu, config(), &stores);
  expect(clean(resumed) && resumed.hashes == straight.hashes, "resumed after a crash: the uninterrupted hash");

  // A signal after 57 steps: emergency checkpoint at step 58 on every rank, then resume.
  std::vector<test::MemoryStore> signalled(static_cast<std::size_t>(ranks));
  const Run stopped = train_ranks(ranks, Device::gpu, config(), &signalled, 57);
  expect(clean(stopped) && stopped.preempted && signalled[0].emergencies == 1 && signalled[0].latest->step == 58,
         "a signal takes an emergency checkpoint at step 58");
  const Run after_signal = train_ranks(ranks, Device::gpu, config(), &signalled);
  expect(clean(after_signal) && after_signal.hashes == straight.hashes, "resumed after a signal: the uninterrupted hash");

  const Run host = train_ranks(ranks, Device::cpu, config(), nullptr);
  expect(clean(host) && !host.on_gpu[0] && host.hashes == straight.hashes,
         "the host ring's hash equals the GPU path's (both sum in the canonical order)");

  // The same order on both paths: a GPU run's checkpoint is the host ring's too.
  const Run on_host = train_ranks(ranks, Device::cpu, config(), &stores);
  expect(clean(on_host) && on_host.hashes == straight.hashes, "the host ring resumes a GPU run's checkpoint");
  std::printf("%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
#endif

int main() {
  const GpuProbe probe = probe_gpu();
  if (!probe.usable) {
    std::printf("SKIP: %s\n", probe.why_not.c_str());
    return 77;
  }
#ifdef SAKER_HAVE_NCCL
  return run_checks();
#else
  return 77;  // not reached: without NCCL the probe is never usable
#endif
}
