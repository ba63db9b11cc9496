// Crash consistency: a child process saves in a loop and is killed with SIGKILL at 200
// random moments. After every kill the newest loadable checkpoint must be intact and no
// older than the last one the child reported as saved. Plain and encrypted.
//
// Progress is counted in events, never in time: in three kills of four the parent first
// waits (deadline: minutes, only against a hung child) until the child reports a save newer
// than anything seen before, then kills it a random moment later, so those kills land
// inside later saves whatever the machine's load; the fourth kills it at a random moment
// from its start (loading, clean-up, the first save).
#include <catch2/catch.hpp>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "ckpt/commit.hpp"
#include "ckpt_test_util.hpp"
#include "common/log.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

constexpr std::size_t kFloats = 64 * 1024;  // 256 KiB per checkpoint: wide windows to be killed in

[[noreturn]] void child_loop(const std::filesystem::path& dir, int report_fd, const std::filesystem::path& key) {
  try {
    Options o;
    o.keep_last = 2;
    o.key_file = key;
    Checkpointer ck(dir, o);
    auto latest = ck.load_latest();
    std::uint64_t step = latest ? latest->state.step : 0;
    for (;;) {
      ck.save(make_state(++step, kFloats));
      if (::write(report_fd, &step, sizeof step) != sizeof step) ::_exit(3);
    }
  } catch (...) {
    ::_exit(2);
  }
}

// Waits until `fd` has a report to read or the child closed it; false after `deadline_ms`.
bool wait_readable(int fd, int deadline_ms) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int n = ::poll(&p, 1, deadline_ms);
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

}  // namespace

TEST_CASE("SIGKILL at 200 random moments never leaves a bad newest checkpoint", "[ckpt][crash]") {
  TempDir dir;
  const bool encrypted = GENERATE(false, true);
  INFO((encrypted ? "encrypted" : "plain"));
  std::filesystem::path key;
  if (encrypted) {
    auto bytes = random_bytes(32, 77);
    write_file(dir / "key", std::string(reinterpret_cast<const char*>(bytes.data()), 32), 0600);
    key = dir / "key";
  }
  Options probe_options;
  probe_options.key_file = key;
  saker::log::set_level(saker::log::Level::warn);
  std::mt19937_64 rng(20240611);
  std::uint64_t reported = 0;  // newest step a child said it saved
  std::uint64_t seen = 0;      // newest step we loaded after a kill
  int kills_mid_save = 0;
  int waited = 0;              // kills that came after a reported new save
  for (int i = 0; i < 200; ++i) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      child_loop(dir / "c", fds[1], key);
    }
    ::close(fds[1]);
    const bool after_progress = rng() % 4 != 0;
    std::uint64_t step = 0;
    if (after_progress) {
      // Read reports until one is newer than the last checkpoint loaded: the event, not a
      // time window, says the child got somewhere.
      bool progressed = false;
      while (!progressed) {
        REQUIRE(wait_readable(fds[0], 300000));  // generous: only a hung child trips it
        REQUIRE(::read(fds[0], &step, sizeof step) == sizeof step);
        reported = std::max(reported, step);
        progressed = step > seen;
      }
      ++waited;
    }
    ::usleep(static_cast<useconds_t>(rng() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    INFO("kill " << i);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    while (::read(fds[0], &step, sizeof step) == sizeof step) reported = std::max(reported, step);
    ::close(fds[0]);

    // Anything the dead child left half-written is cleaned up by the next writer.
    Checkpointer probe(dir / "c", probe_options);
    for (const auto& e : std::filesystem::directory_iterator(dir / "c"))
      REQUIRE_FALSE(commit::is_temp_name(e.path().filename().string()));
    auto got = probe.load_latest();
    if (reported == 0 && !got) continue;  // killed before the first save committed
    REQUIRE(got);
    CHECK(got->rejected.empty());
    REQUIRE(got->state.step >= reported);
    REQUIRE(got->state.step >= seen);
    if (got->state.step > reported) ++kills_mid_save;  // committed, killed before reporting
    seen = got->state.step;
    const State expect = make_state(seen, kFloats);
    for (const Tensor& t : expect.tensors) REQUIRE(same_bytes(*got->state.find(t.name), t));
    REQUIRE(got->state.rng_state == expect.rng_state);
  }
  saker::log::set_level(saker::log::Level::info);
  // Each waited-for kill came after a save newer than every earlier one: counted, not timed.
  CHECK(seen >= static_cast<std::uint64_t>(waited));
  CHECK(waited > 0);
  WARN("200 kills, newest step " << seen << ", " << kills_mid_save << " kills after a commit, before the child reported it");
}
