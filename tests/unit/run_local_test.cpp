// saker-run --local end to end, with small shell programs as the ranks.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "launcher/run/launcher.hpp"
#include "run_test_support.hpp"

using namespace saker::run;
using namespace saker::run::test;
namespace fs = std::filesystem;

TEST_CASE("every local rank sees its rank variables") {
  TempDir t;
  RunOptions o = local(3, "echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR > " +
                              t.path.string() + "/r$RANK; [ -n \"$MASTER_PORT\" ]");
  CHECK(run_supervised(o, "unused") == kExitOk);
  CHECK(t.read("r0") == "0/3/0/3/127.0.0.1\n");
  CHECK(t.read("r2") == "2/3/2/3/127.0.0.1\n");
}

TEST_CASE("a failing rank is restarted, with the attempt number exported") {
  TempDir t;
  // Rank 1 fails in the first attempt only.
  RunOptions o = local(2, "echo $SAKER_RUN_ATTEMPT >> " + t.path.string() +
                              "/attempts$RANK; [ $RANK = 1 ] && [ $SAKER_RUN_ATTEMPT = 1 ] && exit 9; exit 0");
  o.ckpt_dir = (t.path / "ckpt").string();
  CHECK(run_supervised(o, "unused") == kExitOk);
  CHECK(t.read("attempts1") == "1\n2\n");
  CHECK(fs::is_directory(o.ckpt_dir));
}

// Issue 31, item 3: a rank that exits 3 (saker(7): an input is not usable, e.g. saker-train
// --data nosuch.h5) fails every attempt alike; the old saker-run spent all its restarts on it.
TEST_CASE("a rank exiting 3 (an unusable input) is not restarted, and saker-run exits 3") {
  TempDir t;
  RunOptions o = local(2, "echo $SAKER_RUN_ATTEMPT >> " + t.path.string() + "/attempts$RANK; [ $RANK = 0 ] && exit 3; sleep 30");
  o.max_restarts = 3;
  CHECK(run_supervised(o, "unused") == 3);
  CHECK(t.read("attempts0") == "1\n");
}

TEST_CASE("kill-on-bad-exit: a failing rank stops the others, and restarts run out") {
  TempDir t;
  RunOptions o = local(2, "[ $RANK = 0 ] && exit 9; sleep 30");
  o.max_restarts = 1;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_supervised(o, "unused") == kExitStepFailed);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("an attempt past --timeout is killed and counted as a failure") {
  RunOptions o = local(1, "sleep 30");
  o.max_restarts = 0;
  o.timeout_s = 0.5;
  CHECK(run_supervised(o, "unused") == kExitStepFailed);
}

TEST_CASE("ranks reporting an emergency checkpoint end the local run as preempted") {
  TempDir t;
  RunOptions o = local(2, "[ $RANK = 0 ] && touch \"$SAKER_PREEMPT_MARKER\"; exit 75");
  o.ckpt_dir = t.path.string();
  CHECK(run_supervised(o, "unused") == kExitPreempted);
}

TEST_CASE("every rank of an attempt gets the same fresh job key, and the next attempt a new one") {
  TempDir t;
  // Each rank records the key it was given; rank 0 fails attempt 1 once rank 1 has written.
  RunOptions o = local(2, "cd " + t.path.string() + " && echo \"$SAKER_JOB_KEY\" > key$RANK.$SAKER_RUN_ATTEMPT; "
                          "if [ $SAKER_RUN_ATTEMPT = 1 ] && [ $RANK = 0 ]; then "
                          "while [ ! -s key1.1 ]; do sleep 0.05; done; exit 9; fi");
  o.max_restarts = 1;
  CHECK(run_supervised(o, "unused") == kExitOk);
  const std::string first = t.read("key0.1");
  CHECK(first.size() == 65);  // 64 hex digits and the newline
  CHECK(first.find_first_not_of("0123456789abcdef\n") == std::string::npos);
  CHECK(t.read("key1.1") == first);
  CHECK(t.read("key0.2") == t.read("key1.2"));
  CHECK(t.read("key0.2").size() == 65);
  CHECK(t.read("key0.2") != first);
}

TEST_CASE("--transit reaches every rank as SAKER_COMM_TRANSIT") {
  TempDir t;
  RunOptions o = local(2, "echo \"$SAKER_COMM_TRANSIT\" > " + t.path.string() + "/t$RANK");
  o.transit = "encrypt";
  CHECK(run_supervised(o, "unused") == kExitOk);
  CHECK(t.read("t0") == "encrypt\n");
  CHECK(t.read("t1") == "encrypt\n");
}

// Another user (uid 65534) listening on a port with SO_REUSEADDR, as torch's TCPStore
// would; the process goes away with the object, whatever the test's outcome.
class Squatter {
 public:
  Squatter() {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(1);
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      socklen_t len = sizeof a;
      if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) ::_exit(1);
      const int port = ntohs(a.sin_port);
      (void)!::write(ready[1], &port, sizeof port);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    const bool got = ::read(ready[0], &port_, sizeof port_) == static_cast<ssize_t>(sizeof port_);
    ::close(ready[0]);
    REQUIRE(got);
  }
  ~Squatter() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_CASE("a MASTER_PORT that another user already listens on is refused before any rank starts") {
  const Squatter squatter;
  TempDir t;
  RunOptions o = local(1, "touch " + t.path.string() + "/started");
  o.master_port = squatter.port();
  try {
    run_supervised(o, "unused");
    FAIL_CHECK("the taken port was not refused");
  } catch (const saker::Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("MASTER_PORT " + std::to_string(o.master_port)) &&
                             Catch::Matchers::Contains("another program listens there"));
  }
  CHECK_FALSE(fs::exists(t.path / "started"));
}

TEST_CASE("an attempt's end removes the shared-memory segments its killed ranks left") {
  // A segment name of a rank that died before its node's ranks mapped (and removed) it:
  // its creator's pid is gone. The attempt itself is a plain script; saker-run sweeps after it.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  const std::string name = "/saker-" + std::to_string(child) + "-" + std::string(32, 'a');
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string path = "/dev/shm" + name;
  REQUIRE(fs::exists(path));
  CHECK(run_supervised(local(1, "exit 0"), "unused") == kExitOk);
  CHECK_FALSE(fs::exists(path));
  shm_unlink(name.c_str());
}

namespace {

// A program of the build tree: $SAKER_BUILDDIR (make check) or the current directory.
std::string built(const std::string& relative) {
  const char* dir = std::getenv("SAKER_BUILDDIR");
  return (fs::path(dir != nullptr && *dir != '\0' ? dir : ".") / relative).string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// Issue 31, item 4: Ctrl-C during `saker-run --local ... -- saker-train` announced an emergency
// checkpoint, then SIGINT killed the ranks and none was written. Now saker-train takes SIGINT
// like SIGTERM: every rank stops at one step, writes the emergency checkpoint, exits 75, and
// saker-run ends the run as interrupted with 75 (saker(7)). Runs the real programs; waits for
// conditions (training under way, the process gone), never for a fixed time.
TEST_CASE("SIGINT to saker-run --local gets saker-train's emergency checkpoint and exit 75") {
  const std::string run = built("launcher/saker-run/saker-run"), train = built("launcher/saker-train/saker-train");
  if (::access(run.c_str(), X_OK) != 0 || ::access(train.c_str(), X_OK) != 0) {
    WARN("skipped: " + run + " or " + train + " is not built (run from the build directory or set SAKER_BUILDDIR)");
    return;
  }
  TempDir t;
  const std::string data = (t.path / "d.h5").string(), ckpt = (t.path / "ckpt").string();
  const fs::path log = t.path / "log";
  REQUIRE(std::system((train + " make-data --out " + data + " --samples 256 --features 4 >/dev/null").c_str()) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setpgid(0, 0);  // a process group of its own: the test's terminal, if any, stays out of it
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // --ckpt-every 0: only an emergency checkpoint can put a file into the checkpoint directory.
    ::execl(run.c_str(), run.c_str(), "--local", "-n", "2", "--grace", "120", "--ckpt-dir", ckpt.c_str(), "--",
            train.c_str(), "--data", data.c_str(), "--steps", "1000000", "--ckpt-every", "0", "--log-every", "1",
            "--step-sleep-ms", "20", "--device", "cpu", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  REQUIRE(pid > 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (slurp(log).find("saker-train: step ") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(slurp(log).find("saker-train: step ") != std::string::npos);
  ::kill(pid, SIGINT);
  int status = 0;
  pid_t got = 0;
  while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (got == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  const std::string out = slurp(log);
  INFO(out);
  REQUIRE(got == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kExitPreempted);
  CHECK_THAT(out, Catch::Contains("emergency checkpoint at step") && Catch::Contains("interrupted (SIGINT received") &&
                      Catch::Contains("emergency checkpoint committed") && !Catch::Contains("killed by SIGINT"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') ++files;
  }
  CHECK(files > 0);
}

// Issue 31, item 2, end to end: a rank that writes its checkpoint directory into
// SAKER_RUN_CKPT_NOTE (as saker.torch's checkpoint module does) gets a restart line naming it.
TEST_CASE("saker-run --local names the checkpoint directory a program reported, and never says 'from the beginning'") {
  const std::string run = built("launcher/saker-run/saker-run");
  if (::access(run.c_str(), X_OK) != 0) {
    WARN("skipped: " + run + " is not built (run from the build directory or set SAKER_BUILDDIR)");
    return;
  }
  TempDir t;
  const std::string log = (t.path / "log").string();
  const std::string script = "[ -n \"$SAKER_RUN_CKPT_NOTE\" ] && echo " + t.path.string() +
                             "/own > \"$SAKER_RUN_CKPT_NOTE\"; [ $SAKER_RUN_ATTEMPT = 1 ] && exit 9; exit 0";
  const std::string cmd = "env -u SAKER_RUN_OWN_CHECKPOINTS " + run + " --local -n 1 --max-restarts 1 /bin/sh -c '" +
                          script + "' >" + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = slurp(log);
  INFO(out);
  CHECK(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 0);
  CHECK_THAT(out, Catch::Contains("restart 1 of 1; the program keeps its own checkpoints (in " + t.path.string() + "/own") &&
                      !Catch::Contains("from the beginning"));
}
