// --ckpt-every auto (issue 32, item 4): Young/Daly's interval, the failure history that
// gives M, and the decision that every rank shares.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "common/error.hpp"
#include "launcher/train/comm_reducer.hpp"
#include "launcher/train/goodput.hpp"
#include "saker/comm.hpp"
#include "tests/unit/train_test_support.hpp"

using namespace saker::train;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/saker-goodput-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A clock the test moves by hand.
struct FakeClock {
  double t = 1000;
  AutoInterval::Clock fn() {
    return [this] { return t; };
  }
};

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("goodput: Daly's interval, Young's first term and its limits") {
  // δ=0.41 s, M=400 s: sqrt(328)=18.1108; x=δ/2M=0.0005125; ·(1 + 0.0075462 + 0.0000569) − 0.41
  CHECK(daly_interval(0.41, 400) == Approx(17.8385).epsilon(1e-4));
  // Small δ/M: Young's sqrt(2δM) within a fraction of a percent.
  CHECK(daly_interval(0.01, 86400) == Approx(std::sqrt(2 * 0.01 * 86400)).epsilon(0.005));
  // δ >= 2M: checkpointing costs as much as it saves; Daly's answer is τ = M.
  CHECK(daly_interval(10, 5) == 5);
  CHECK(daly_interval(10, 4.9) == 4.9);
  CHECK(daly_interval(0, 100) == 0);
  // Longer saves or rarer failures: longer intervals.
  CHECK(daly_interval(1, 400) > daly_interval(0.5, 400));
  CHECK(daly_interval(1, 800) > daly_interval(1, 400));
}

TEST_CASE("goodput: τ in steps is rounded, at least 1 and at most 2^24") {
  CHECK(interval_steps(18.2, 0.5) == 36);
  CHECK(interval_steps(18.3, 0.5) == 37);
  CHECK(interval_steps(0.01, 1.0) == 1);
  CHECK(interval_steps(0, 1.0) == 1);
  CHECK(interval_steps(1e9, 1e-6) == kMaxIntervalSteps);
  CHECK(interval_steps(5, 0) == 1);
}

TEST_CASE("goodput: --ckpt-every takes auto or a whole number, and names anything else") {
  CHECK(parse_ckpt_every("auto").automatic);
  CHECK(parse_ckpt_every("50").steps == 50);
  CHECK_FALSE(parse_ckpt_every("50").automatic);
  CHECK(parse_ckpt_every("0").steps == 0);
  for (const char* bad : {"", "-1", "+3", "5x", "Auto", "1e3", "99999999999999999999999"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_ckpt_every(bad), Catch::Contains("--ckpt-every '" + std::string(bad) + "'") &&
                                                 Catch::Contains("--ckpt-every auto"));
  }
}

TEST_CASE("goodput: the history counts crashed and stopped attempts as interruptions, not finished ones") {
  FailureHistory h("/nonexistent/x");
  h.begin(100, false);
  h.alive(400);  // crashed after its checkpoint at 400: never ended
  FailureHistory h2("/nonexistent/x");
  h2.parse(h.text());
  h2.begin(410, true);
  CHECK(h2.interruptions() == 1);
  h2.end(700, true);  // preempted at 700
  FailureHistory h3("/nonexistent/x");
  h3.parse(h2.text());
  h3.begin(800, false);
  CHECK(h3.interruptions() == 2);
  CHECK(h3.running_seconds(900) == Approx(300 + 290 + 100));
  const MtbfEstimate m = h3.estimate(900);
  CHECK(m.seconds == Approx(690.0 / 2));
  CHECK_THAT(m.source, Catch::Contains("this job's history (2 interruption(s) in 690 s of running)"));
  CHECK_THAT(h3.summary(900), Catch::Contains("attempt 3; 2 interruption(s)") &&
                                  Catch::Contains("1 crashed or killed, 1 stopped by a signal"));
  h3.end(1000, false);  // finished: a later start is no interruption
  FailureHistory h4("/nonexistent/x");
  h4.parse(h3.text());
  h4.begin(2000, false);
  CHECK(h4.interruptions() == 2);
}

TEST_CASE("goodput: with no interruption yet M is the documented prior, or the time run if longer") {
  FailureHistory h("/nonexistent/x");
  h.begin(0, false);
  CHECK(h.estimate(60).seconds == FailureHistory::kPriorMtbfSeconds);
  CHECK_THAT(h.estimate(60).source, Catch::Contains("prior of one interruption an hour"));
  CHECK(h.estimate(200000).seconds == Approx(200000));
}

TEST_CASE("goodput: a restart the history does not show counts once (the attempt died before writing)") {
  FailureHistory fresh("/nonexistent/x");
  fresh.begin(50, true);
  CHECK(fresh.interruptions() == 1);
  FailureHistory quiet("/nonexistent/x");
  quiet.begin(50, false);
  CHECK(quiet.interruptions() == 0);
  // The crashed attempt is on file: the environment's restart is the same interruption.
  FailureHistory known("/nonexistent/x");
  known.begin(10, false);
  known.begin(50, true);
  CHECK(known.interruptions() == 1);
  // An attempt that died before its first checkpoint adds no running time; M stays >= 1 s.
  CHECK(fresh.estimate(50).seconds == 1);

  CHECK(restarted_from_env("2", nullptr, nullptr));
  CHECK(restarted_from_env("1", "1", nullptr));
  CHECK(restarted_from_env(nullptr, nullptr, "3"));
  CHECK_FALSE(restarted_from_env("1", "0", "0"));
  CHECK_FALSE(restarted_from_env(nullptr, nullptr, nullptr));
  CHECK_FALSE(restarted_from_env("", "", ""));
}

TEST_CASE("goodput: the history file is 0600, replaced atomically, and read back") {
  TempDir t;
  const fs::path path = t.path / FailureHistory::kFileName;
  FailureHistory h(path.string());
  CHECK(h.load().empty());  // no file yet: a fresh history
  const mode_t umask_before = ::umask(0);  // the file must be 0600 whatever the umask
  h.begin(100, false);
  h.write();
  ::umask(umask_before);
  CHECK(mode_of(path) == 0600);
  h.alive(160);
  h.write();
  CHECK(mode_of(path) == 0600);
  // Nothing is left beside it (the temporary file was renamed over it).
  int files = 0;
  for (const auto& e : fs::directory_iterator(t.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
  FailureHistory back(path.string());
  CHECK(back.load().empty());
  REQUIRE(back.attempts().size() == 1);
  CHECK(back.attempts()[0].alive == 160);
  CHECK(back.attempts()[0].end == FailureHistory::End::running);
}

TEST_CASE("goodput: a damaged, planted or linked history is ignored with a warning, and replaced") {
  TempDir t;
  const fs::path path = t.path / FailureHistory::kFileName;
  std::ofstream(path) << "saker-train failure history 1\nattempt start=1 alive=x end=running\n";
  FailureHistory h(path.string());
  CHECK_THAT(h.load(), Catch::Contains("ignored") && Catch::Contains("alive=NUMBER"));
  CHECK(h.attempts().empty());
  std::ofstream(path) << "something else\n";
  CHECK_THAT(h.load(), Catch::Contains("first line"));
  std::ofstream(path) << "saker-train failure history 1\nattempt start=1 alive=2 end=maybe\n";
  CHECK_THAT(h.load(), Catch::Contains("end=maybe"));
  // A symbolic link (to another file the history would steer or overwrite) is not followed.
  fs::remove(path);
  std::ofstream(t.path / "elsewhere") << "saker-train failure history 1\n";
  fs::create_symlink(t.path / "elsewhere", path);
  CHECK_THAT(h.load(), Catch::Contains("symbolic link"));
  h.begin(5, false);
  h.write();  // replaces the link itself; the file it pointed to is untouched
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(mode_of(path) == 0600);
  std::ifstream other(t.path / "elsewhere");
  std::string first;
  std::getline(other, first);
  CHECK(first == "saker-train failure history 1");
}

TEST_CASE("goodput: very old attempts fold into one carried line and still count") {
  FailureHistory h("/nonexistent/x");
  for (std::size_t i = 0; i < FailureHistory::kMaxAttempts + 5; ++i) {
    h.begin(static_cast<double>(i) * 100, false);
    h.alive(static_cast<double>(i) * 100 + 10);
  }
  CHECK(h.attempts().size() == FailureHistory::kMaxAttempts);
  CHECK(h.interruptions() == static_cast<int>(FailureHistory::kMaxAttempts + 4));
  FailureHistory back("/nonexistent/x");
  back.parse(h.text());
  back.begin(1e6, false);
  CHECK(back.interruptions() == static_cast<int>(FailureHistory::kMaxAttempts + 5));
  CHECK_THAT(back.summary(1e6), Catch::Contains("attempt 1006"));
}

TEST_CASE("goodput: the first save measures δ, then the interval follows Young/Daly and is printed") {
  SoloReducer solo;
  FakeClock clock;
  std::vector<std::string> lines;
  AutoIntervalOptions o;
  o.mtbf_s = 400;
  AutoInterval a(o, solo, nullptr, clock.fn(), [&](const std::string& l) { lines.push_back(l); });
  std::uint64_t step = 0;
  std::vector<std::uint64_t> saves;
  // Steps of 0.5 s, saves of 0.41 s: τ = 17.84 s, 36 steps.
  auto run_to = [&](std::uint64_t last, double save_s) {
    while (step < last) {
      ++step;
      clock.t += 0.5;
      if (a.due(step)) {
        clock.t += save_s;
        a.saved(step, save_s);
        saves.push_back(step);
      }
    }
  };
  run_to(100, 0.41);
  REQUIRE(saves.size() >= 2);
  CHECK(saves[0] == 11);  // the first step (1) starts the measurement; 10 steps later
  CHECK(saves[1] == 11 + 36);
  REQUIRE(lines.size() == 1);  // printed once: later saves measure the same
  CHECK(lines[0] == "checkpoint every 36 steps (τ=17.8 s from δ=0.41 s, M=400 s from --mtbf; a step takes 0.5 s)");
  CHECK(a.interval() == 36);
  // Saves become ten times dearer: the average δ rises, τ with it; the change is printed.
  run_to(2000, 4.1);
  CHECK(lines.size() >= 2);
  CHECK_THAT(lines.back(), Catch::Contains("M=400 s from --mtbf"));
  CHECK(a.interval() > 80);
  CHECK(a.interval() <= 110);  // δ=4.1 s: τ=sqrt(3280)(1.024)−4.1 ≈ 54.5 s, 109 steps
}

TEST_CASE("goodput: small wobbles of the measurements do not change (or reprint) the interval") {
  SoloReducer solo;
  FakeClock clock;
  std::vector<std::string> lines;
  AutoIntervalOptions o;
  o.mtbf_s = 400;
  AutoInterval a(o, solo, nullptr, clock.fn(), [&](const std::string& l) { lines.push_back(l); });
  for (std::uint64_t step = 1; step <= 3000; ++step) {
    clock.t += step % 2 == 0 ? 0.45 : 0.55;
    if (a.due(step)) {
      const double s = (step / 37) % 2 == 0 ? 0.39 : 0.43;
      clock.t += s;
      a.saved(step, s);
    }
  }
  CHECK(lines.size() == 1);
}

TEST_CASE("goodput: M from the failure history, kept alive at every save") {
  TempDir t;
  FailureHistory h((t.path / FailureHistory::kFileName).string());
  h.begin(0, false);
  h.alive(300);  // crashed at ~300 s
  h.begin(1000, true);
  SoloReducer solo;
  FakeClock clock;
  clock.t = 1000;
  std::vector<std::string> lines;
  AutoInterval a(AutoIntervalOptions{}, solo, &h, clock.fn(), [&](const std::string& l) { lines.push_back(l); });
  for (std::uint64_t step = 1; step <= 11; ++step) {
    clock.t += 1;
    if (a.due(step)) a.saved(step, 0.5);
  }
  REQUIRE(a.choice());
  // 300 s before the crash and ~11 s since: one interruption in 311 s.
  CHECK(a.choice()->mtbf_s == Approx(311).margin(1));
  CHECK_THAT(lines.at(0), Catch::Contains("from this job's history (1 interruption(s) in 311 s of running)"));
  FailureHistory back(h.path());
  CHECK(back.load().empty());
  CHECK(back.attempts().back().alive == Approx(1011));
}

TEST_CASE("goodput: every rank checkpoints at the same steps, whatever each rank measures") {
  // Each rank has its own clock; rank 1's says saves take much longer and steps vary.
  // Only rank 0's view decides, and the choice reaches rank 1 through the allreduce.
  constexpr int kRanks = 2;
  std::vector<std::vector<std::uint64_t>> saves(kRanks);
  std::vector<std::vector<std::uint64_t>> intervals(kRanks);
  auto errors = test::run_ranks(kRanks, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    CommReducer reducer(std::move(comm));
    FakeClock clock;
    AutoIntervalOptions o;
    o.mtbf_s = 600;
    AutoInterval a(o, reducer, nullptr, clock.fn(), [](const std::string&) {});
    for (std::uint64_t step = 1; step <= 600; ++step) {
      clock.t += r == 0 ? 0.2 : 0.05 * static_cast<double>(step % 7);
      if (a.due(step)) {
        const double s = r == 0 ? 0.1 + 0.05 * static_cast<double>(step % 3) : 3.0;
        clock.t += s;
        a.saved(step, s);
        saves[static_cast<std::size_t>(r)].push_back(step);
        intervals[static_cast<std::size_t>(r)].push_back(a.interval());
      }
    }
  });
  CHECK(errors == std::vector<std::string>(kRanks));
  CHECK(saves[0].size() > 3);
  CHECK(saves[0] == saves[1]);
  CHECK(intervals[0] == intervals[1]);
}

TEST_CASE("goodput: train() with --ckpt-every auto saves the same steps on every rank") {
  struct Recording final : SnapshotStore {
    void save(const Snapshot& s, bool) override { steps.push_back(s.step); }
    std::optional<Snapshot> load_latest(const std::string&) override { return std::nullopt; }
    std::string describe() const override { return "recording"; }
    std::vector<std::uint64_t> steps;
  };
  const Dataset data = make_synthetic(SyntheticSpec{.rows = 256, .features = 8, .classes = 3, .spread = 1.0, .seed = 4});
  constexpr int kRanks = 2;
  std::vector<Recording> stores(kRanks);
  std::mutex print;
  auto errors = test::run_ranks(kRanks, [&](int r, std::unique_ptr<saker::comm::Communicator> comm) {
    CommReducer reducer(std::move(comm));
    AutoIntervalOptions o;
    o.mtbf_s = 0.05;  // tiny M: intervals of a few steps, decided from real timings
    AutoInterval a(o, reducer, nullptr, AutoInterval::wall_seconds, [&](const std::string&) {});
    TrainConfig c = test::short_run({16}, 32, 3);
    c.steps = 80;
    c.auto_interval = &a;
    train(c, data, reducer, &stores[static_cast<std::size_t>(r)], nullptr);
  });
  CHECK(errors == std::vector<std::string>(kRanks));
  // The probe at step 11 and the final step; how many come between depends on measured
  // times (a sanitizer build saves slower), so only their agreement is checked.
  CHECK(stores[0].steps.size() >= 2);
  CHECK(stores[0].steps.front() == 11);
  CHECK(stores[0].steps.back() == 80);
  CHECK(stores[0].steps == stores[1].steps);
}

TEST_CASE("goodput: saker-train's session writes this attempt's line at the start and its end at the end") {
  TempDir t;
  const std::string path = (t.path / FailureHistory::kFileName).string();
  SoloReducer solo;
  {
    GoodputSession first(0, t.path.string(), solo, false);
    FailureHistory h(path);
    REQUIRE(h.load().empty());
    REQUIRE(h.attempts().size() == 1);
    CHECK(h.attempts()[0].end == FailureHistory::End::running);  // a crash now would leave it so
    first.finished(true);                                           // preempted: emergency checkpoint
  }
  CHECK(mode_of(path) == 0600);
  GoodputSession second(0, t.path.string(), solo, false);
  second.finished(false);
  FailureHistory h(path);
  REQUIRE(h.load().empty());
  REQUIRE(h.attempts().size() == 2);
  CHECK(h.attempts()[0].end == FailureHistory::End::stopped);
  CHECK(h.attempts()[1].end == FailureHistory::End::done);
  h.begin(AutoInterval::wall_seconds(), false);
  CHECK(h.interruptions() == 1);
}
