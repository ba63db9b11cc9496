#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/run/options.hpp"
#include "launcher/run/step.hpp"

using namespace saker::run;

namespace {
RunOptions parse(std::vector<const char*> args) {
  args.insert(args.begin(), "saker-run");
  return parse_run_options(static_cast<int>(args.size()), args.data(), nullptr);
}
}  // namespace

TEST_CASE("options before -- are saker-run's, everything after is the program's") {
  const RunOptions o = parse({"--max-restarts", "5", "--ckpt-dir", "/c", "--grace", "7", "--timeout", "30",
                              "--", "train", "--max-restarts", "9"});
  CHECK(o.max_restarts == 5);
  CHECK(o.ckpt_dir == "/c");
  CHECK(o.grace_s == 7);
  CHECK(o.timeout_s == 30);
  CHECK(o.program == std::vector<std::string>{"train", "--max-restarts", "9"});
  CHECK(o.requeue);
}

TEST_CASE("local mode takes -n; Slurm mode refuses it") {
  const RunOptions o = parse({"--local", "-n", "4", "--", "prog"});
  CHECK(o.local);
  CHECK(o.ntasks == 4);
  CHECK_THROWS_AS(parse({"-n", "4", "--", "prog"}), saker::Error);
  CHECK_THROWS_AS(parse({"--local", "-n", "0", "--", "prog"}), saker::Error);
}

TEST_CASE("usage errors name the problem") {
  CHECK_THROWS_AS(parse({"--local"}), saker::Error);
  CHECK_THROWS_AS(parse({"--bogus", "--", "x"}), saker::Error);
  CHECK_THROWS_AS(parse({"--max-restarts", "-1", "--", "x"}), saker::Error);
  CHECK(parse({"--help"}).help);
}

TEST_CASE("the srun line launches with PMI2 and kill-on-bad-exit, re-entering saker-run per task") {
  const RunOptions o = parse({"--srun-arg=--cpu-bind=cores", "--", "train", "-x"});
  const auto cmd = srun_command(o.srun_args, "/bin/saker-run", o.program);
  CHECK(cmd == std::vector<std::string>{"srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "--cpu-bind=cores",
                                        "/bin/saker-run", "--exec-rank", "--", "train", "-x"});
}

TEST_CASE("option parsing stops at the program name, as with srun and torchrun") {
  RunOptions o = parse({"--local", "-n", "1", "/bin/echo", "--epochs", "3"});
  CHECK(o.ntasks == 1);
  CHECK(o.program == std::vector<std::string>{"/bin/echo", "--epochs", "3"});
  o = parse({"--local", "-n2", "--ckpt-dir", "/c", "--timeout=5", "train", "--", "-n", "7"});
  CHECK(o.ntasks == 2);
  CHECK(o.ckpt_dir == "/c");
  CHECK(o.timeout_s == 5);
  CHECK(o.program == std::vector<std::string>{"train", "--", "-n", "7"});
  // "--" still works and is not passed on.
  CHECK(parse({"--local", "--", "--weird-name"}).program == std::vector<std::string>{"--weird-name"});
  CHECK(parse({"--hang-timeout", "30", "--", "x"}).hang_timeout_s == 30);
  CHECK(parse({"--", "x"}).hang_timeout_s == 600);
}
