// saker-run's runtime files (heartbeats, the preempt marker) as another user would attack
// them: pre-created, planted, or a directory of theirs offered as the place to put them.
// Tests run as root, so "another user" is a file chown'ed to nobody (uid 65534).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/options.hpp"
#include "launcher/run/process.hpp"
#include "launcher/run/runtime_dir.hpp"
#include "run_test_support.hpp"

using namespace saker::run;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using saker::run::test::TempDir;

namespace {

constexpr uid_t kNobody = 65534;

// One attempt only: a refusal must show as this attempt's outcome.
RunOptions local(int n, const std::string& script) {
  RunOptions o = test::local(n, script);
  o.max_restarts = 0;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const saker::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// The attacks, end to end through saker-run --local.

TEST_CASE("a preempt marker that is another user's file, or a symlink, is no emergency checkpoint") {
  TempDir t;
  // The ranks fail (exit 9). A marker counted as "emergency checkpoint committed" would
  // turn the failure into a preemption (exit 75) and skip the restart policy.
  for (const std::string plant : {"touch \"$m\" && chown 65534 \"$m\"", "ln -s /etc/hostname \"$m\""}) {
    RunOptions o = local(1, "m=\"$SAKER_PREEMPT_MARKER\"; " + plant + "; exit 9");
    o.ckpt_dir = (t.path / "ckpt").string();
    CHECK(run_supervised(o, "unused") == kExitStepFailed);
  }
  // The rank's own marker still counts.
  RunOptions own = local(1, "echo 7 > \"$SAKER_PREEMPT_MARKER\"; exit 9");
  own.ckpt_dir = (t.path / "ckpt").string();
  CHECK(run_supervised(own, "unused") == kExitPreempted);
}

TEST_CASE("heartbeats and the preempt marker live in a fresh private directory for each attempt") {
  TempDir t;
  // Each attempt records where its runtime directory is, its mode and owner; attempt 1 fails.
  RunOptions o = local(1, "d=$(dirname \"$SAKER_PREEMPT_MARKER\"); [ \"$d\" = \"$SAKER_HEARTBEAT_DIR\" ] && "
                          "echo \"$d $(stat -c %a:%u \"$d\")\" >> " + (t.path / "dirs").string() +
                          "; [ $SAKER_RUN_ATTEMPT = 1 ] && exit 9; exit 0");
  o.ckpt_dir = (t.path / "ckpt").string();
  o.max_restarts = 1;
  CHECK(run_supervised(o, "unused") == kExitOk);
  std::istringstream lines(t.read("dirs"));
  std::set<std::string> dirs;
  std::string dir, mode;
  while (lines >> dir >> mode) {
    dirs.insert(dir);
    CHECK(mode == "700:" + std::to_string(::geteuid()));
    CHECK(fs::path(dir).parent_path() == fs::path(o.ckpt_dir));
    CHECK(fs::path(dir).filename().string().rfind(".saker-run-", 0) == 0);
    CHECK_FALSE(fs::exists(dir));  // removed when its attempt ended
  }
  CHECK(dirs.size() == 2);
}

TEST_CASE("a checkpoint directory of another user, or one others may write that is not sticky, is refused") {
  TempDir t;
  RunOptions o = local(1, "exit 0");
  o.ckpt_dir = (t.path / "theirs").string();
  fs::create_directory(o.ckpt_dir);
  REQUIRE(::chown(o.ckpt_dir.c_str(), kNobody, kNobody) == 0);
  const std::string why = error_of([&] { run_supervised(o, "unused"); });
  CHECK_THAT(why, Contains(o.ckpt_dir) && Contains("uid 65534") && Contains("another user owns it"));
  o.ckpt_dir = (t.path / "open").string();
  fs::create_directory(o.ckpt_dir);
  REQUIRE(::chmod(o.ckpt_dir.c_str(), 0777) == 0);
  CHECK_THAT(error_of([&] { run_supervised(o, "unused"); }), Contains("mode 0777") && Contains("not sticky"));
  REQUIRE(::chmod(o.ckpt_dir.c_str(), 01777) == 0);  // as /tmp: allowed
  CHECK(run_supervised(o, "unused") == kExitOk);
}

// The building blocks.

TEST_CASE("a private directory is made fresh; anything already there is refused, never adopted") {
  TempDir t;
  const std::string mine = (t.path / "mine").string();
  make_private_dir(mine);
  struct stat st {};
  REQUIRE(::lstat(mine.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  CHECK_NOTHROW(check_private_dir(mine));
  // Even one's own existing directory is not reused: its contents are unknown.
  CHECK_THAT(error_of([&] { make_private_dir(mine); }), Contains("never adopts"));
  // Another user's directory, pre-created at the path.
  const std::string theirs = (t.path / "theirs").string();
  fs::create_directory(theirs);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  CHECK_THAT(error_of([&] { make_private_dir(theirs); }),
             Contains(theirs) && Contains("owned by uid 65534") && Contains("remove it"));
  CHECK_THAT(error_of([&] { check_private_dir(theirs); }), Contains("another user made it"));
  // A symlink to a directory of ours is still a symlink.
  const std::string link = (t.path / "link").string();
  fs::create_directory_symlink(mine, link);
  CHECK_THAT(error_of([&] { make_private_dir(link); }), Contains("a symlink"));
  CHECK_THAT(error_of([&] { check_private_dir(link); }), Contains("a symlink"));
  // A directory of ours that others may enter.
  REQUIRE(::chmod(mine.c_str(), 0755) == 0);
  CHECK_THAT(error_of([&] { check_private_dir(mine); }), Contains("mode 0755") && Contains("others may read"));
}

TEST_CASE("the parent of a run directory must be ours or root's, and sticky if others may write it") {
  TempDir t;
  CHECK_NOTHROW(check_parent_dir(t.path.string()));
  CHECK_NOTHROW(check_parent_dir("/tmp"));
  const std::string theirs = (t.path / "theirs").string();
  fs::create_directory(theirs);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  CHECK_THAT(error_of([&] { check_parent_dir(theirs); }), Contains("another user owns it"));
  const std::string group = (t.path / "group").string();
  fs::create_directory(group);
  REQUIRE(::chmod(group.c_str(), 0770) == 0);
  CHECK_THAT(error_of([&] { check_parent_dir(group); }), Contains("mode 0770") && Contains("chmod go-w"));
  std::ofstream(t.path / "file") << "x";
  CHECK_THAT(error_of([&] { check_parent_dir((t.path / "file").string()); }), Contains("need a directory"));
  CHECK_THAT(error_of([&] { check_parent_dir((t.path / "missing").string()); }), Contains("No such file"));
}

TEST_CASE("a run directory has an unguessable name, holds the marker, and is removed with what is in it") {
  TempDir t;
  std::string path;
  {
    const RunDir a(t.path.string(), "42", 1);
    const RunDir b(t.path.string(), "42", 1);
    CHECK(a.path() != b.path());
    CHECK_THAT(a.path(), Contains("/.saker-run-42-" + std::to_string(::getpid()) + "-1-"));
    CHECK_FALSE(a.preempt_marker_set());
    std::ofstream(a.preempt_marker()) << "12\n";
    CHECK(a.preempt_marker_set());
    REQUIRE(::chown(a.preempt_marker().c_str(), kNobody, kNobody) == 0);
    CHECK_FALSE(a.preempt_marker_set());  // another user's marker does not count
    fs::remove(b.preempt_marker());
    fs::create_symlink("/etc/hostname", b.preempt_marker());
    CHECK_FALSE(b.preempt_marker_set());  // nor does a symlink
    path = a.path();
  }
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::is_empty(t.path));
}

TEST_CASE("a marker in a run directory that is no longer private does not count") {
  TempDir t;
  const RunDir d(t.path.string(), "local", 1);
  std::ofstream(d.preempt_marker()) << "1\n";
  REQUIRE(::chown(d.path().c_str(), kNobody, kNobody) == 0);
  CHECK_FALSE(d.preempt_marker_set());
}

TEST_CASE("a heartbeat another user planted, or a symlink, is ignored") {
  TempDir t;
  const std::string dir = t.path.string();
  std::ofstream(t.path / "rank-1") << "x";
  REQUIRE(::chown((t.path / "rank-1").c_str(), kNobody, kNobody) == 0);
  fs::create_symlink("/etc/hostname", t.path / "rank-2");
  const double now = wall_clock();
  CHECK_FALSE(stale_heartbeat(dir, now + 1000, 5).has_value());
  std::ofstream(t.path / "rank-0") << "x";
  REQUIRE(stale_heartbeat(dir, now + 1000, 5).has_value());
  CHECK(stale_heartbeat(dir, now + 1000, 5)->rank == 0);
  // A rank's own beat creates its file private.
  ::setenv(kHeartbeatDirEnv, dir.c_str(), 1);
  HeartbeatWriter(3).beat();
  ::unsetenv(kHeartbeatDirEnv);
  struct stat st {};
  REQUIRE(::stat((t.path / "rank-3").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("a checkpoint directory saker-run creates is 0700 whatever the umask, so it is never refused") {
  TempDir t;
  const mode_t old = ::umask(002);  // RHEL's default for users: new directories 0775
  RunOptions o = local(1, "exit 0");
  o.ckpt_dir = (t.path / "new" / "ckpt").string();
  const int rc = run_supervised(o, "unused");
  ::umask(old);
  CHECK(rc == kExitOk);
  struct stat st {};
  REQUIRE(::stat(o.ckpt_dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
}
