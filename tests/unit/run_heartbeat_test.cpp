// Hang detection: what counts as progress (a rank's heartbeat file) and what saker-run
// does with a rank that stops making it.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launcher/run/heartbeat.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/options.hpp"
#include "launcher/run/process.hpp"

using namespace saker::run;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/saker-hb-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

RunOptions local(const std::string& script) {
  RunOptions o;
  o.local = true;
  o.ntasks = 2;
  o.grace_s = 1;
  o.max_restarts = 0;
  o.program = {"/bin/sh", "-c", script};
  return o;
}
}  // namespace

TEST_CASE("the oldest heartbeat past the limit names its rank; unwatched files are ignored") {
  TempDir t;
  const std::string dir = t.path.string();
  std::ofstream(t.path / "rank-0").put('x');
  std::ofstream(t.path / "rank-3").put('x');
  std::ofstream(t.path / "notes").put('x');
  const double now = wall_clock();
  CHECK_FALSE(stale_heartbeat(dir, now, 5).has_value());
  const auto stale = stale_heartbeat(dir, now + 10, 5);
  REQUIRE(stale.has_value());
  CHECK(stale->silent_s > 9);
  ::setenv(kHeartbeatDirEnv, dir.c_str(), 1);
  HeartbeatWriter w(3);
  ::unsetenv(kHeartbeatDirEnv);
  // Make rank 0 older than rank 3, then beat rank 3: rank 0 is the stale one.
  const timespec old[2] = {{static_cast<time_t>(now - 100), 0}, {static_cast<time_t>(now - 100), 0}};
  REQUIRE(::utimensat(AT_FDCWD, (t.path / "rank-0").c_str(), old, 0) == 0);
  w.beat();
  const auto r = stale_heartbeat(dir, wall_clock(), 50);
  REQUIRE(r.has_value());
  CHECK(r->rank == 0);
}

TEST_CASE("a rank whose heartbeat stops is stopped and counted as a failure; one that never beats is not watched") {
  // Rank 1 beats once and then hangs; rank 0 never beats and would run 30 s.
  RunOptions o = local(
      "if [ \"$RANK\" = 1 ]; then touch \"$SAKER_HEARTBEAT_DIR/rank-1\"; fi; exec sleep 30");
  o.hang_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_supervised(o, "unused") == kExitStepFailed);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // Nobody beats: no hang detection, the program ends on its own with success.
  RunOptions quiet = local("sleep 2");
  quiet.hang_timeout_s = 1;
  CHECK(run_supervised(quiet, "unused") == kExitOk);
}

TEST_CASE("--timeout sends SIGTERM and waits --grace before SIGKILL, so ranks can checkpoint") {
  TempDir t;
  // The rank traps SIGTERM, "checkpoints" (writes a file) and exits; SIGKILL would leave no file.
  RunOptions o = local("trap 'echo saved > " + (t.path / "ckpt-$RANK").string() +
                       "; exit 75' TERM; while :; do sleep 0.1; done");
  o.timeout_s = 0.5;
  o.grace_s = 5;
  CHECK(run_supervised(o, "unused") == kExitStepFailed);
  CHECK(fs::exists(t.path / "ckpt-0"));
  CHECK(fs::exists(t.path / "ckpt-1"));
}

TEST_CASE("a program that cannot execute exits 127 and is never restarted") {
  RunOptions o = local("true");
  o.program = {"/nonexistent"};
  o.max_restarts = 3;
  CHECK(run_supervised(o, "unused") == kExitExec);
  // A rank exiting with a refusal code (here 127 from the shell) is not restarted either.
  TempDir t;
  RunOptions r = local("echo x >> " + (t.path / "starts").string() + "; exit 127");
  r.ntasks = 1;
  r.max_restarts = 3;
  CHECK(run_supervised(r, "unused") == kExitExec);
  std::ifstream in(t.path / "starts");
  std::string line;
  int starts = 0;
  while (std::getline(in, line)) ++starts;
  CHECK(starts == 1);
}
