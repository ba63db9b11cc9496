// The recovery breakdown (issue 32 §5), and the hang limit derived from the step time.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "launcher/run/heartbeat.hpp"
#include "launcher/run/recovery.hpp"
#include "run_test_support.hpp"

using namespace saker::run;

namespace {
void touch_at(const std::string& path, double t) {
  std::ofstream(path).put('\n');
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(t);
  times[0].tv_nsec = times[1].tv_nsec = static_cast<long>((t - static_cast<time_t>(t)) * 1e9);
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}
}  // namespace

TEST_CASE("the breakdown names every phase in seconds, n/a for what the ranks did not mark") {
  RecoveryMarks m{100, 101.5, 102, 102.5, 103.5, 104, 104.25};
  CHECK(breakdown_line(m) ==
        "recovery breakdown (s): detect 1.50, decide 0.50, respawn 0.50, rendezvous 1.00, restore 0.50, "
        "first step 0.25; total 4.25");
  m.rendezvous = m.restored = 0;
  const std::string line = breakdown_line(m);
  CHECK(line.find("rendezvous n/a, restore n/a, first step 1.75") != std::string::npos);
  CHECK(line.find("counted in the next one") != std::string::npos);
  CHECK(breakdown_line(RecoveryMarks{100, 101, 102}).empty());  // the ranks showed nothing
}

TEST_CASE("the tracker waits for every rank's first step, from heartbeats or marked phases") {
  test::TempDir dir;
  const std::string d = dir.path.string();
  RecoveryTracker t(d, 2);
  RecoveryMarks m;
  // Times after now: a heartbeat file's birth time (when the file system keeps one) is now.
  const double b = static_cast<double>(::time(nullptr)) + 100;
  CHECK_FALSE(t.poll(m));
  std::ofstream(d + "/rank-0").put('\n');  // the ranks' first beats, now
  std::ofstream(d + "/rank-1").put('\n');
  CHECK_FALSE(t.poll(m));
  CHECK(m.ranks_up > 0);
  touch_at(d + "/rank-0", b + 3);                 // rank 0's first step
  touch_at(d + "/rank-1.rendezvous", b + 2);
  CHECK_FALSE(t.poll(m));                        // rank 1 has not stepped
  touch_at(d + "/rank-1.first-step", b + 4);
  CHECK(t.poll(m));
  CHECK(m.first_step == Approx(b + 4));
  CHECK(m.rendezvous == 0);                      // rank 0 did not mark it
}

TEST_CASE("the derived hang limit: the start-up allowance, then ten times the slowest step, at least 60 s") {
  HangLimit auto_limit(-1);
  CHECK(auto_limit.enabled());
  CHECK(auto_limit.limit() == HangLimit::kStartupSeconds);
  double t = 1000;
  for (int i = 0; i < 3; ++i) auto_limit.observe({{0, t += 2}, {1, t}});
  CHECK(auto_limit.limit() == HangLimit::kStartupSeconds);  // still warming up
  for (int i = 0; i < 3; ++i) auto_limit.observe({{0, t += 2}, {1, t}});
  CHECK(auto_limit.limit() == HangLimit::kFloorSeconds);  // 10 x 2 s < 60 s
  auto_limit.observe({{0, t += 9}, {1, t}});               // a step with a checkpoint save
  CHECK(auto_limit.limit() == Approx(90));
  CHECK(auto_limit.basis().find("derived") != std::string::npos);
  auto_limit.new_attempt();                                // a restart loads again
  CHECK(auto_limit.limit() >= HangLimit::kStartupSeconds);
  CHECK(HangLimit(30).limit() == 30);
  CHECK(HangLimit(30).basis() == "--hang-timeout 30 s");
  CHECK_FALSE(HangLimit(0).enabled());
}

TEST_CASE("heartbeat_times skips phase marks; the writer's phase marks are files of their own") {
  test::TempDir dir;
  ::setenv(kHeartbeatDirEnv, dir.path.c_str(), 1);
  HeartbeatWriter w(2);
  w.beat();
  w.phase("restored");
  ::unsetenv(kHeartbeatDirEnv);
  const auto times = heartbeat_times(dir.path.string());
  CHECK(times.size() == 1);
  CHECK(times.count(2) == 1);
  CHECK(phase_time(dir.path.string(), 2, "restored").has_value());
  CHECK_FALSE(phase_time(dir.path.string(), 2, "rendezvous").has_value());
}
