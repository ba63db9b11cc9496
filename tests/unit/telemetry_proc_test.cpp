// The kernel-file parsers and the step's CPU/memory/I-O source, on good input and on
// bad input by class: truncated, non-numeric, negative, odd command names, missing files.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "telemetry/proc.hpp"
#include "telemetry/step_source.hpp"
#include "tests/unit/telemetry_test_util.hpp"

using namespace saker::telemetry;
using saker::telemetry::testing::fake_process;
using saker::telemetry::testing::stat_line;
using saker::telemetry::testing::TempDir;
using saker::telemetry::testing::write_file;

TEST_CASE("proc stat: fields are counted after the last parenthesis", "[telemetry][proc]") {
  auto s = parse_proc_stat(stat_line(42, "a) (b c", 7, 300, 40, 5, 6));
  REQUIRE(s);
  CHECK(s->ppid == 7);
  CHECK(s->utime == 300);
  CHECK(s->stime == 40);
  CHECK(s->cutime == 5);
  CHECK(s->cstime == 6);
}

TEST_CASE("proc stat: malformed text is refused, not guessed", "[telemetry][proc]") {
  CHECK_FALSE(parse_proc_stat(""));
  CHECK_FALSE(parse_proc_stat("42 (x"));                       // no closing parenthesis
  CHECK_FALSE(parse_proc_stat("42 (x) S 1 1 1 0"));            // truncated (process exiting)
  CHECK_FALSE(parse_proc_stat(stat_line(1, "x", 0, 1, 2, -5)));  // negative child time
  std::string bad = stat_line(1, "x", 0, 1, 2);
  bad.replace(bad.find(" 1 2 "), 5, " one 2 ");
  CHECK_FALSE(parse_proc_stat(bad));
}

TEST_CASE("proc status, io and cgroup files", "[telemetry][proc]") {
  auto m = parse_proc_status("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n");
  REQUIRE(m);
  CHECK(m->rss == 1024u * 1024);
  CHECK(m->hwm == 2048u * 1024);
  auto kthread = parse_proc_status("Name:\tkworker\nState:\tI (idle)\n");
  REQUIRE(kthread);
  CHECK(kthread->rss == 0);
  CHECK_FALSE(parse_proc_status("VmRSS:\t12 MB\n"));      // unit the kernel never writes
  CHECK_FALSE(parse_proc_status("VmRSS:\tlots kB\n"));

  auto io = parse_proc_io("rchar: 5\nread_bytes: 4096\nwrite_bytes: 8192\n");
  REQUIRE(io);
  CHECK(io->read == 4096);
  CHECK(io->write == 8192);
  CHECK_FALSE(parse_proc_io("rchar: 5\n"));  // not readable as this user: fields absent

  CHECK(parse_single_number("123\n") == 123u);
  CHECK_FALSE(parse_single_number("max\n"));
  CHECK_FALSE(parse_single_number("1 2"));
  CHECK(parse_keyed_number("usage_usec 2500000\nuser_usec 1\n", "usage_usec") == 2500000u);
  CHECK_FALSE(parse_keyed_number("usage_usec x\n", "usage_usec"));

  auto v2 = parse_io_stat_v2("8:0 rbytes=100 wbytes=200 rios=1 wios=2\n8:16 rbytes=1 wbytes=2\n");
  REQUIRE(v2);
  CHECK(v2->read == 101);
  CHECK(v2->write == 202);
  CHECK_FALSE(parse_io_stat_v2("8:0 rbytes=lots\n"));
  auto v1 = parse_blkio_v1("8:0 Read 10\n8:0 Write 20\n8:0 Total 30\nTotal 30\n");
  REQUIRE(v1);
  CHECK(v1->read == 10);
  CHECK(v1->write == 20);

  const char* cg = "12:memory:/slurm_n1/uid_1000/job_5/step_0\n4:cpu,cpuacct:/slurm_n1/uid_1000/job_5/step_0/task_1\n0::/\n";
  CHECK(cgroup_path_of(cg, "memory") == "/slurm_n1/uid_1000/job_5/step_0");
  CHECK(cgroup_path_of(cg, "cpuacct") == "/slurm_n1/uid_1000/job_5/step_0/task_1");
  CHECK(cgroup_path_of(cg, "") == "/");
  CHECK_FALSE(cgroup_path_of(cg, "blkio"));
  CHECK_FALSE(cgroup_path_of("garbage\n3:memory\n", "memory"));
  CHECK(slurm_step_cgroup("/system.slice/slurmstepd.scope/job_5/step_0/slurm") == "/system.slice/slurmstepd.scope/job_5/step_0");
  CHECK(slurm_step_cgroup("/slurm_n1/uid_1000/job_5/step_batch") == "/slurm_n1/uid_1000/job_5/step_batch");
  CHECK_FALSE(slurm_step_cgroup("/user.slice/user-0.slice"));
}

TEST_CASE("step source: the process tree below slurmstepd, reaped tasks included", "[telemetry][proc]") {
  TempDir proc;
  const long hz = ::sysconf(_SC_CLK_TCK);
  // slurmstepd 100 reaped tasks worth 2 s; live task 101 (1 s) with child 102 (0.5 s).
  fake_process(proc.path(), 100, 1, 7 * hz, 0, 5000, 5000, 2 * hz, 0, 1000, 0);
  fake_process(proc.path(), 101, 100, hz, 0, 2048, 4096, 0, 0, 10, 20);
  fake_process(proc.path(), 102, 101, hz / 2, 0, 1024, 1024);
  fake_process(proc.path(), 200, 1, 50 * hz, 0, 99999, 99999);  // not the step's
  write_file(proc.path() / "self" / "stat", "not a pid directory\n");
  write_file(proc.path() / "103" / "stat", "103 (exiting");  // half-gone process: skipped
  StepSource src(100, proc.path().string(), (proc.path() / "no-cgroup").string());
  CHECK(src.kind() == "proc");
  auto u = src.read();
  REQUIRE(u);
  CHECK(u->cpu_seconds == Approx(3.5));  // stepd's own 7 s excluded
  CHECK(u->rss == (2048u + 1024u) * 1024);
  CHECK(u->rss_hwm == 4096u * 1024);
  CHECK(u->io.read == 1010);
  CHECK(u->io.write == 20);
  CHECK(u->processes == 2);

  StepSource gone(4242, proc.path().string());
  CHECK_FALSE(gone.read());
  StepSource no_proc(100, (proc.path() / "missing").string());
  CHECK_FALSE(no_proc.read());
}

TEST_CASE("step source: the kernel's children lists, where it has them", "[telemetry][proc]") {
  TempDir proc;
  const long hz = ::sysconf(_SC_CLK_TCK);
  fake_process(proc.path(), 100, 1, 0, 0, 0, 0, hz, 0);
  fake_process(proc.path(), 101, 100, hz, 0, 1024, 1024);
  fake_process(proc.path(), 102, 101, hz, 0, 1024, 1024);
  fake_process(proc.path(), 300, 100, 99 * hz, 0, 1, 1);  // not listed: must not be read
  // slurmstepd's threads 100 and 105: task 101 was forked by thread 105.
  write_file(proc.path() / "100/task/100/children", "");
  write_file(proc.path() / "100/task/105/children", "101 ");
  write_file(proc.path() / "101/task/101/children", "102 999 ");  // 999: exited meanwhile
  StepSource src(100, proc.path().string(), (proc.path() / "nocg").string());
  auto u = src.read();
  REQUIRE(u);
  CHECK(u->cpu_seconds == Approx(3.0));
  CHECK(u->processes == 2);
  // The real /proc: this test process's own step (its parent) reads without error.
  StepSource live(::getppid());
  CHECK(live.read());
}

TEST_CASE("step source: cgroup v1 and v2 step directories", "[telemetry][proc]") {
  TempDir t;
  const auto proc = t.path() / "proc";
  SECTION("v1") {
    const auto cg = t.path() / "cg1";
    write_file(proc / "100" / "cgroup", "5:memory:/slurm_n1/uid_1/job_5/step_0\n4:cpu,cpuacct:/slurm_n1/uid_1/job_5/step_0\n"
                                        "3:blkio:/slurm_n1/uid_1/job_5/step_0\n");
    write_file(cg / "cpuacct" / "slurm_n1/uid_1/job_5/step_0" / "cpuacct.usage", "2500000000\n");
    const auto mem = cg / "memory" / "slurm_n1/uid_1/job_5/step_0";
    write_file(mem / "memory.usage_in_bytes", "1000\n");
    write_file(mem / "memory.max_usage_in_bytes", "5000\n");
    write_file(mem / "memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
    write_file(cg / "blkio" / "slurm_n1/uid_1/job_5/step_0" / "blkio.throttle.io_service_bytes", "8:0 Read 7\n8:0 Write 9\nTotal 16\n");
    StepSource src(100, proc.string(), cg.string());
    CHECK(src.kind() == "cgroup-v1");
    auto u = src.read();
    REQUIRE(u);
    CHECK(u->cpu_seconds == Approx(2.5));
    CHECK(u->rss_hwm == 5000);
    CHECK(u->mem_limit == 0);
    CHECK(u->io.read == 7);
    // The step's cgroup removed under us: nothing to read, no throw.
    std::filesystem::remove_all(cg / "cpuacct");
    CHECK_FALSE(src.read());
  }
  SECTION("v2") {
    const auto cg = t.path() / "cg2";
    write_file(cg / "cgroup.controllers", "cpu memory io\n");
    write_file(proc / "100" / "cgroup", "0::/system.slice/slurmstepd.scope/job_5/step_0/slurm\n");
    const auto step = cg / "system.slice/slurmstepd.scope/job_5/step_0";
    write_file(step / "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\n");
    write_file(step / "memory.current", "3000\n");
    write_file(step / "memory.max", "1048576\n");
    write_file(step / "io.stat", "8:0 rbytes=11 wbytes=22\n");
    StepSource src(100, proc.string(), cg.string());
    CHECK(src.kind() == "cgroup-v2");
    auto u = src.read();
    REQUIRE(u);
    CHECK(u->cpu_seconds == Approx(1.5));
    CHECK(u->rss_hwm == 3000);  // no memory.peak (Linux < 5.19): the current value
    CHECK(u->mem_limit == 1048576);
    CHECK(u->io.write == 22);
  }
  SECTION("not a Slurm step's cgroup: the process tree") {
    write_file(proc / "100" / "cgroup", "5:memory:/user.slice\n4:cpu,cpuacct:/user.slice\n");
    StepSource src(100, proc.string(), (t.path() / "cg").string());
    CHECK(src.kind() == "proc");
  }
}
