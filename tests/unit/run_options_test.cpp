#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
  CHECK(parse({"--", "x"}).hang_timeout_s == kHangAuto);
  CHECK(parse({"--hang-timeout", "auto", "--", "x"}).hang_timeout_s == kHangAuto);
  CHECK_THROWS_WITH(parse({"--hang-timeout", "soon", "--", "x"}), Catch::Contains("--hang-timeout soon"));
}

TEST_CASE("--transit takes auth, encrypt or off") {
  CHECK(parse({"--transit=encrypt", "--", "x"}).transit == "encrypt");
  CHECK(parse({"--transit", "off", "--", "x"}).transit == "off");
  CHECK(parse({"--", "x"}).transit.empty());
  CHECK_THROWS_AS(parse({"--transit=tls", "--", "x"}), saker::Error);
}

TEST_CASE("srun gets the attempt's job key in its environment, never on its command line") {
  // A stand-in srun that records its arguments and environment.
  char tmpl[] = "/tmp/saker-fake-srun-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  {
    std::ofstream srun(dir + "/srun");
    srun << "#!/bin/sh\necho \"$@\" > " << dir << "/argv\necho \"$SAKER_JOB_KEY\" > " << dir << "/key\n";
  }
  ::chmod((dir + "/srun").c_str(), 0755);
  const Env key = job_key_env();
  Env env = key;
  env["PATH"] = dir + ":/usr/bin:/bin";
  const auto step = make_srun_step({}, "/bin/saker-run", {"train"});
  sigset_t none;
  sigemptyset(&none);
  step->start(env, none);
  while (!step->reap()) ::usleep(10000);
  CHECK(step->result().all_ok);
  std::ifstream k(dir + "/key"), a(dir + "/argv");
  std::string seen, argv;
  std::getline(k, seen);
  std::getline(a, argv);
  CHECK(seen == key.at(kJobKeyEnv));
  CHECK(argv.find(seen) == std::string::npos);
  std::filesystem::remove_all(dir);
}

// Issue 31, item 2: a program that keeps its own checkpoints says so with --own-checkpoints or
// SAKER_RUN_OWN_CHECKPOINTS=1 (e.g. exported by the batch script).
TEST_CASE("--own-checkpoints and SAKER_RUN_OWN_CHECKPOINTS say the program keeps its own checkpoints") {
  ::unsetenv(kOwnCheckpointsEnv);
  CHECK_FALSE(parse({"--local", "train"}).own_checkpoints);
  CHECK(parse({"--local", "--own-checkpoints", "train"}).own_checkpoints);
  CHECK_FALSE(parse({"--local", "train", "--own-checkpoints"}).own_checkpoints);  // the program's option
  ::setenv(kOwnCheckpointsEnv, "1", 1);
  CHECK(parse({"--local", "train"}).own_checkpoints);
  ::setenv(kOwnCheckpointsEnv, "0", 1);
  CHECK_FALSE(parse({"--local", "train"}).own_checkpoints);
  ::unsetenv(kOwnCheckpointsEnv);
}

TEST_CASE("options: an abbreviated or mistyped option is named with the one meant, never guessed (issue 31)") {
  CHECK_THROWS_WITH(parse({"--local", "-n", "1", "--max-restart", "2", "--", "x"}),
                    Catch::Contains("unknown option --max-restart (options are never abbreviated); did you mean "
                                    "--max-restarts?"));
  CHECK_THROWS_WITH(parse({"--loacl", "-n", "1", "--", "x"}), Catch::Contains("unknown option --loacl; did you mean --local?"));
  CHECK_THROWS_WITH(parse({"--local", "-n", "0", "--", "x"}), Catch::Contains("pass -n 1 or more"));
}

// Issue 31 §6: saker-run on the shared front end (common/cli.hpp). Every bad value is a
// cli::UsageError (exit 2) that names the option as written, the reason and the fix.
TEST_CASE("options: bad values name the option, what is valid and the fix") {
  using saker::cli::UsageError;
  CHECK_THROWS_WITH(parse({"--local", "-n", "x", "--", "p"}),
                    Catch::Contains("saker-run: -n is 'x': it must be a whole number, 1 or more (fix: pass -n 1 or more)"));
  CHECK_THROWS_WITH(parse({"--local", "--ntasks=0", "p"}), Catch::Contains("--ntasks is '0'"));
  CHECK_THROWS_WITH(parse({"--local", "-n", "99999999", "p"}), Catch::Contains("pass -n 1 to 65536"));
  CHECK_THROWS_WITH(parse({"--max-restarts", "-1", "--", "p"}),
                    Catch::Contains("--max-restarts is '-1': it must be a whole number from 0 to 1000000"));
  CHECK_THROWS_WITH(parse({"--grace", "soon", "p"}), Catch::Contains("--grace is 'soon': it must be a number, 0 or more (fix: pass --grace 0 or more)"));
  CHECK_THROWS_AS(parse({"--timeout", "-5", "p"}), UsageError);
  CHECK_THROWS_AS(parse({"--resize-wait", "inf", "p"}), UsageError);
  CHECK_THROWS_WITH(parse({"--master-port", "70000", "p"}), Catch::Contains("from 0 to 65535"));
  CHECK_THROWS_WITH(parse({"--ckpt-dir"}), Catch::Contains("saker-run: --ckpt-dir needs a value"));
  CHECK_THROWS_WITH(parse({"--local"}), Catch::Contains("saker-run: no PROGRAM given"));
  CHECK_THROWS_WITH(parse({"--nodes", "3:1", "p"}), Catch::StartsWith("saker-run: --nodes 3:1"));
  CHECK_THROWS_WITH(parse({"--on-node-loss", "pray", "p"}), Catch::StartsWith("saker-run: --on-node-loss=pray"));
  CHECK_THROWS_AS(parse({"--transit", "tls", "p"}), UsageError);
  CHECK_THROWS_WITH(parse({"--local", "--local", "p"}), Catch::Contains("--local is given twice"));
  CHECK_THROWS_WITH(parse({"--local", "--nodes", "1:2", "p"}), Catch::Contains("--nodes with --local"));
}

TEST_CASE("options: --exec-rank is accepted but never shown; --help lists the rest with -n") {
  CHECK(parse({"--exec-rank", "--", "p"}).exec_rank);
  std::string help;
  std::vector<const char*> argv{"saker-run", "--help"};
  CHECK(parse_run_options(2, argv.data(), &help).help);
  CHECK(help.find("-n, --ntasks N") != std::string::npos);
  CHECK(help.find("--srun-arg ARG") != std::string::npos);
  CHECK(help.find("exec-rank") == std::string::npos);
  CHECK(help.find("75") != std::string::npos);  // the exit codes of saker(7)
}
