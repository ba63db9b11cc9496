#include <catch2/catch.hpp>

#include <sys/wait.h>

#include "launcher/run/supervisor.hpp"

using namespace saker::run;

namespace {
Attempt attempt(int n, Outcome o, std::string detail = "rank 1 exited with code 1") {
  Attempt a;
  a.number = n;
  a.outcome = o;
  a.detail = std::move(detail);
  a.seconds = 1.5;
  return a;
}
}  // namespace

TEST_CASE("failures restart until --max-restarts is spent, then give up") {
  const Policy p{2, true};
  Decision d = decide(p, attempt(1, Outcome::failed), 0);
  CHECK(d.action == Action::restart);
  CHECK(d.reason.find("restart 1 of 2") != std::string::npos);
  CHECK(d.reason.find("rank 1 exited with code 1") != std::string::npos);
  CHECK(decide(p, attempt(2, Outcome::timed_out), 1).action == Action::restart);
  d = decide(p, attempt(3, Outcome::failed), 2);
  CHECK(d.action == Action::give_up);
  CHECK(d.reason.find("--max-restarts") != std::string::npos);
  CHECK(decide(Policy{0, true}, attempt(1, Outcome::failed), 0).action == Action::give_up);
}

TEST_CASE("a refusal (exit 78) is not restarted") {
  Attempt a = attempt(1, Outcome::failed, "rank 0 exited with code 78");
  a.refused = true;
  const Decision d = decide(Policy{3, true}, a, 0);
  CHECK(d.action == Action::give_up);
  CHECK(d.reason.find("not restarting") != std::string::npos);
  CHECK(d.reason.find("rank 0 exited with code 78") != std::string::npos);
}

TEST_CASE("usage errors and programs that cannot execute are refusals too") {
  CHECK(is_refusal_exit_code(2));
  CHECK(is_refusal_exit_code(78));
  CHECK(is_refusal_exit_code(79));  // every checkpoint damaged: a restart finds the same files
  CHECK(is_refusal_exit_code(126));
  CHECK(is_refusal_exit_code(127));
  CHECK_FALSE(is_refusal_exit_code(1));
  CHECK_FALSE(is_refusal_exit_code(4));
  CHECK_FALSE(is_refusal_exit_code(75));
  Attempt a = attempt(1, Outcome::failed, "rank 0 exited with code 127");
  a.refused = true;
  a.refused_code = 127;
  const Decision d = decide(Policy{3, true}, a, 0);
  CHECK(d.action == Action::give_up);
  CHECK(d.reason.find("cannot be executed") != std::string::npos);
}

TEST_CASE("exit 79 is explained as every checkpoint damaged, not as refused settings") {
  Attempt a = attempt(1, Outcome::failed, "rank 0 exited with code 79");
  a.refused = true;
  a.refused_code = 79;
  const Decision d = decide(Policy{3, true}, a, 0);
  CHECK(d.action == Action::give_up);
  CHECK(d.reason.find("every checkpoint") != std::string::npos);
  CHECK(d.reason.find("damaged") != std::string::npos);
  CHECK(d.reason.find("refused its settings") == std::string::npos);
}

TEST_CASE("a restart promises a checkpoint only when there is a checkpoint directory") {
  CHECK(decide(Policy{3, false, true}, attempt(1, Outcome::failed), 0).reason.find("from the latest checkpoint") !=
        std::string::npos);
}

TEST_CASE("preemption requeues inside Slurm and stops elsewhere") {
  CHECK(decide(Policy{3, true}, attempt(1, Outcome::preempted, "SIGUSR1 received"), 0).action == Action::requeue);
  const Decision d = decide(Policy{3, false}, attempt(1, Outcome::preempted, "SIGTERM received"), 0);
  CHECK(d.action == Action::give_up);
  CHECK(d.reason.find("SIGTERM") != std::string::npos);
  CHECK(decide(Policy{3, true}, attempt(1, Outcome::success, ""), 3).action == Action::finish);
}

TEST_CASE("wait statuses are described in words") {
  CHECK(describe_wait_status(3 << 8) == "exited with code 3");
  CHECK(describe_wait_status(SIGKILL) == "killed by SIGKILL");
}

TEST_CASE("the summary lists every attempt and the result") {
  const std::vector<Attempt> all = {attempt(1, Outcome::failed), attempt(2, Outcome::success, "")};
  const std::string s = summary(all, Decision{Action::finish, "the step completed"});
  CHECK(s.find("2 attempts") != std::string::npos);
  CHECK(s.find("attempt 1: failed after 1.5 s (rank 1 exited with code 1)") != std::string::npos);
  CHECK(s.find("attempt 2: success") != std::string::npos);
  CHECK(s.find("result: the step completed") != std::string::npos);
}

// Issue 31, item 3: saker(7) gives 3 to an input that is not usable (saker-train --data
// nosuch.h5); every restart would find the same file, so saker-run stops and says why.
TEST_CASE("a rank's exit 3 (an unusable input) is final: not restarted, and the reason says so") {
  CHECK(is_refusal_exit_code(3));
  Attempt a = attempt(1, Outcome::failed, "rank 0 exited with code 3");
  a.refused = true;
  a.refused_code = 3;
  const Decision d = decide(Policy{3, true}, a, 0);
  CHECK(d.action == Action::give_up);
  CHECK_THAT(d.reason, Catch::Contains("exit code 3") && Catch::Contains("not usable") &&
                           Catch::Contains("not restarting"));
}

// Issue 31, item 2: `saker-run --local -n 2 -- python3 train_hvd.py --ckpt-dir D` said "restart 1
// of 3 from the beginning (no --ckpt-dir, so no checkpoint to resume from)", and the script then
// resumed from its own D. Without --ckpt-dir saker-run cannot know, so it must not say "from
// the beginning"; a program that keeps its own checkpoints can say so (--own-checkpoints).
TEST_CASE("a restart without --ckpt-dir does not claim to start from the beginning") {
  const std::string unknown = decide(Policy{3, false, false}, attempt(1, Outcome::failed), 0).reason;
  CHECK_THAT(unknown, !Catch::Contains("from the beginning") && !Catch::Contains("no checkpoint to resume"));
  CHECK_THAT(unknown, Catch::Contains("restart 1 of 3") && Catch::Contains("--own-checkpoints"));
  const std::string own = decide(Policy{3, false, false, true}, attempt(1, Outcome::failed), 0).reason;
  CHECK_THAT(own, Catch::Contains("restart 1 of 3") && Catch::Contains("keeps its own checkpoints") &&
                      !Catch::Contains("from the beginning"));
}

// Issue 31, item 4: Ctrl-C is a stop like preemption; the result says "interrupted", and
// promises a resume from an emergency checkpoint only when the ranks reported one.
TEST_CASE("an interrupted attempt says so, and whether an emergency checkpoint was reported") {
  Attempt a = attempt(1, Outcome::preempted, "SIGINT received, emergency checkpoint committed");
  a.interrupted = true;
  a.checkpointed = true;
  Decision d = decide(Policy{3, false}, a, 0);
  CHECK(d.action == Action::give_up);
  CHECK_THAT(d.reason, Catch::StartsWith("interrupted (SIGINT received") &&
                           Catch::Contains("resume from its emergency checkpoint"));
  a.checkpointed = false;
  d = decide(Policy{3, false}, a, 0);
  CHECK_THAT(d.reason, Catch::Contains("no emergency checkpoint was reported") &&
                           !Catch::Contains("resume from its emergency checkpoint"));
}

TEST_CASE("a restart names the checkpoint directory the program reported (SAKER_RUN_CKPT_NOTE)") {
  Policy p{3, false};
  p.program_ckpt_dir = "/scratch/run1";
  const std::string r = decide(p, attempt(1, Outcome::failed), 0).reason;
  CHECK_THAT(r, Catch::Contains("restart 1 of 3") && Catch::Contains("its own checkpoints (in /scratch/run1") &&
                    !Catch::Contains("from the beginning"));
}
