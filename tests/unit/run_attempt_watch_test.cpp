// AttemptWatch, the state machine saker-run runs while an attempt's ranks run: driven with a
// fake clock and fake senses (no processes, no Slurm).
#include <catch2/catch.hpp>

#include <signal.h>

#include "launcher/run/attempt_watch.hpp"

using namespace saker::run;

namespace {
bool said(const Orders& o, const std::string& text) {
  for (const auto& l : o.lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("a preemption signal is forwarded once, and the ranks are killed after --grace") {
  AttemptWatch w(WatchConfig{10, 0, 120, false, false}, Senses{}, 1, 100);
  Orders o = w.tick(101, SIGUSR1, false);
  CHECK(o.forward == SIGUSR1);
  CHECK(said(o, "received SIGUSR1"));
  CHECK(w.tick(105, SIGTERM, false).forward == 0);  // the first signal counts
  CHECK_FALSE(w.tick(110, 0, false).kill);
  o = w.tick(111.5, 0, false);
  CHECK(o.kill);
  CHECK(said(o, "grace period over"));
  CHECK_FALSE(w.tick(200, 0, false).kill);  // once
  CHECK(w.preempt_signal() == SIGUSR1);
}

TEST_CASE("SIGCHLD is no preemption") {
  AttemptWatch w(WatchConfig{10, 0, 120, false, false}, Senses{}, 1, 100);
  CHECK(w.tick(101, SIGCHLD, false).forward == 0);
  CHECK(w.preempt_signal() == 0);
}

TEST_CASE("--timeout stops the attempt: SIGTERM, then SIGKILL after --grace") {
  AttemptWatch w(WatchConfig{5, 30, 120, false, false}, Senses{}, 2, 100);
  CHECK_FALSE(w.tick(129, 0, false).terminate);
  Orders o = w.tick(131, 0, false);
  CHECK(o.terminate);
  CHECK(said(o, "attempt 2 ran past --timeout 30 s"));
  CHECK_FALSE(w.tick(135, 0, false).kill);
  CHECK(w.tick(136.5, 0, false).kill);
  CHECK(w.stopped_why() == "ran past --timeout 30 s");
}

TEST_CASE("a hung rank stops the attempt; the heartbeat is asked at most once a second") {
  int asked = 0;
  Senses s;
  s.hung = [&](double now) -> std::optional<std::string> {
    ++asked;
    if (now > 150) return std::string("rank 1 made no progress");
    return std::nullopt;
  };
  AttemptWatch w(WatchConfig{5, 0, 120, false, true}, s, 1, 100);
  for (double t = 100; t < 110; t += 0.2) w.tick(t, 0, false);
  CHECK(asked >= 8);
  CHECK(asked <= 10);
  const Orders o = w.tick(151, 0, false);
  CHECK(o.terminate);
  CHECK(w.stopped_why() == "rank 1 made no progress");
}

TEST_CASE("nodes are probed only once srun reported a failed task; a lost node kills the step at once") {
  int probes = 0;
  Senses s;
  s.lost_nodes = [&] {
    ++probes;
    return probes >= 2 ? std::vector<std::string>{"saker3"} : std::vector<std::string>{};
  };
  AttemptWatch w(WatchConfig{5, 0, 120, true, false}, s, 1, 100);
  w.tick(101, 0, false);
  CHECK(probes == 0);
  CHECK_FALSE(w.tick(102, 0, true).kill);
  CHECK(w.first_failure_at() == 102);
  CHECK_FALSE(w.tick(102.5, 0, true).kill);  // once a second
  const Orders o = w.tick(103.1, 0, true);
  CHECK(o.kill);
  CHECK(said(o, "node(s) saker3 do not answer"));
  CHECK(w.lost() == std::vector<std::string>{"saker3"});
  CHECK(w.lost_found_at() == 103.1);
  CHECK(probes == 2);
}

TEST_CASE("outside Slurm nothing is probed") {
  int probes = 0;
  Senses s;
  s.lost_nodes = [&] { return ++probes, std::vector<std::string>{"x"}; };
  AttemptWatch w(WatchConfig{5, 0, 120, false, false}, s, 1, 100);
  CHECK_FALSE(w.tick(101, 0, true).kill);
  CHECK(probes == 0);
}

TEST_CASE("a grow waits --resize-wait for a checkpoint boundary, then SIGTERM, then SIGKILL after --grace") {
  int asked = 0;
  Senses s;
  s.grow = [&](double now) -> std::optional<std::string> {
    ++asked;
    if (now >= 110) return std::string("growing to 4 nodes");
    return std::nullopt;
  };
  AttemptWatch w(WatchConfig{5, 0, 30, true, false}, s, 3, 100);
  w.tick(101, 0, false);
  CHECK(asked == 0);  // not in the first 2 s
  for (double t = 102; t < 110; t += 0.5) w.tick(t, 0, false);
  CHECK(asked == 4);  // every 2 s
  Orders o = w.tick(110.5, 0, false);
  CHECK(said(o, "growing to 4 nodes"));
  CHECK(w.grow_requested());
  CHECK_FALSE(w.tick(140, 0, false).terminate);
  o = w.tick(141, 0, false);
  CHECK(o.terminate);
  CHECK(said(o, "did not stop at a checkpoint boundary within 30 s (--resize-wait)"));
  CHECK(w.grow_terminated());
  CHECK_FALSE(w.tick(145, 0, false).kill);
  CHECK(w.tick(146.5, 0, false).kill);
  CHECK(asked == 5);  // never asked again once requested
}
