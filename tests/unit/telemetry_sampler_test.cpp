// A step sampled end to end without Slurm: a fake /proc tree, the stand-in NVML and a
// rank's counter file, then what saker-stats makes of the record.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "telemetry/comm_counters.hpp"
#include "telemetry/report.hpp"
#include "telemetry/sampler.hpp"
#include "tests/unit/telemetry_test_util.hpp"

using namespace saker::telemetry;
using saker::telemetry::testing::fake_process;
using saker::telemetry::testing::TempDir;
using saker::telemetry::testing::write_file;

TEST_CASE("sampler: a step with one busy core of two, an idle GPU and a rank in allreduce", "[telemetry][sampler]") {
  TempDir t;
  const auto proc = t.path() / "proc";
  const long hz = ::sysconf(_SC_CLK_TCK);
  write_file(t / "nvml.script",
             "gpu minor=3 util=0,0,0,40 memutil=0 used=100,900,500 total=1000 power_mw=100000 energy_mj=1000,11000,21000,31000 "
             "temp=40,80 sm=1000 throttle=0,0x40,0x40,0 ecc=0\n"
             "gpu minor=5 util=90 total=1000 used=0\n"
             "xid minor=3 code=48\n");
  ::setenv("SAKER_NVML_SCRIPT", (t / "nvml.script").c_str(), 1);
  const auto counters = t.path() / "counters";
  std::filesystem::create_directories(counters);
  ::setenv("SAKER_TELEMETRY_DIR", counters.c_str(), 1);
  CommCountersPublisher rank5(5, 8);
  ::unsetenv("SAKER_TELEMETRY_DIR");

  SamplerConfig c;
  c.info.job = "42";
  c.info.step = "0";
  c.info.node = "n7";
  c.info.uid = ::getuid();
  c.info.cpus = 2;
  c.info.interval = 10;
  c.info.start = 1000;
  c.stepd = 100;
  c.gpus = {3, 9};  // 9: not visible to NVML
  c.counters_dir = counters.string();
  c.mem_limit = 1u << 30;
  c.nvml_library = SAKER_NVML_STANDIN;
  c.proc_root = proc.string();
  c.cgroup_root = (t / "nocg").string();
  // A task burning one core: 10 s of CPU every 10 s.
  fake_process(proc, 100, 1, 0, 0, 0, 0);
  fake_process(proc, 101, 100, 10 * hz, 0, 100 << 10, 200 << 10);
  StepSampler s(c);
  CHECK(s.source_kind() == "proc");
  s.sample(1010);
  fake_process(proc, 101, 100, 20 * hz, 0, 150 << 10, 300 << 10);
  rank5.allreduce_done(1 << 20, 8'000'000'000);  // 8 s of allreduce
  s.sample(1020);
  // The task exited and was reaped: its 30 s moved to slurmstepd's cutime.
  std::filesystem::remove_all(proc / "101");
  fake_process(proc, 100, 1, 0, 0, 0, 0, 30 * hz);
  s.sample(1030);
  NodeStepRecord r = s.summary(1030);

  CHECK(r.info.samples == 3);
  CHECK(r.cpu.cpu_seconds == Approx(30));
  CHECK(r.cpu.efficiency == Approx(0.5));
  CHECK(r.cpu.util.mean == Approx(50));
  CHECK(r.cpu.rss_hwm == 300u << 20);
  CHECK(r.cpu.mem_limit == 1u << 30);
  REQUIRE(r.gpus.size() == 2);
  const GpuSummary& g = r.gpus[0];
  CHECK(g.present);
  CHECK(g.idle_fraction == Approx(1.0));  // 0, 0, 0 (the 4th value is never reached)
  CHECK(g.mem_used_max == 900);
  CHECK(g.energy_j == Approx(20.0));      // 21000 - 1000 mJ
  CHECK(g.temperature_max_c == 80);
  CHECK(g.throttled_fraction == Approx(2.0 / 3));
  CHECK(g.throttle_reasons == 0x40);
  CHECK(g.xid_errors == 1);
  CHECK(g.last_xid == 48);
  CHECK_FALSE(r.gpus[1].present);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].rank == 5);
  CHECK(r.ranks[0].allreduce_s == Approx(8));
  CHECK(r.ranks[0].bytes == 1u << 20);

  const auto v = verdicts({r});
  auto has = [&](const std::string& text) {
    for (const auto& line : v)
      if (line.find(text) != std::string::npos) return true;
    return false;
  };
  CHECK(has("GPU 3 on node n7 idle 100% of step 42.0"));
  CHECK(has("GPU 9 on node n7 (step 42.0) was not visible to NVML"));
  CHECK(has("was slowed (hw-thermal) in 67% of samples"));
  CHECK(has("GPU 3 on node n7 (step 42.0) reported 1 XID error(s), the last XID 48"));
  CHECK(has("CPU efficiency on node n7 (step 42.0) was 50% of 2 allocated CPU(s)"));
  const std::string table_text = table({r});
  CHECK(table_text.find("42.0        n7") != std::string::npos);
  CHECK(table_text.find("50%") != std::string::npos);
  const std::string json = to_json("42", {r}, {});
  CHECK(json.find("\"efficiency\":0.5") != std::string::npos);
  CHECK(json.find("\"verdicts\":[\"") != std::string::npos);
  const std::string svg = svg_plot("job <42>", {r});
  CHECK(svg.find("<polyline") != std::string::npos);
  CHECK(svg.find("job &lt;42&gt;") != std::string::npos);
}

TEST_CASE("sampler: no driver on the node", "[telemetry][sampler]") {
  TempDir empty_proc;  // not the real /proc: where pid_max is 4194304 a pid 999999 may be running
  SamplerConfig c;
  c.info.job = "1";
  c.info.step = "0";
  c.info.node = "n1";
  c.info.cpus = 1;
  c.stepd = 999999;
  c.proc_root = empty_proc.path().string();
  c.cgroup_root = (empty_proc / "nocg").string();
  c.gpus = {0};
  c.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  StepSampler s(c);
  s.sample(10);
  NodeStepRecord r = s.summary(20);
  CHECK(r.info.gpu_note.find("no NVIDIA driver") != std::string::npos);
  REQUIRE(r.gpus.size() == 1);
  CHECK_FALSE(r.gpus[0].present);
  CHECK(r.cpu.cpu_seconds == 0);
}

TEST_CASE("report: sparkline and sizes", "[telemetry][report]") {
  CHECK(sparkline({0, 100}) == "▁█");
  CHECK(sparkline({}).empty());
  CHECK(sparkline(std::vector<double>(600, 50), 60).size() == 60 * 3);
  CHECK(sparkline({-5, 500}) == "▁█");
  CHECK(human_bytes(300.0 * (1 << 20)) == "300 MiB");
  CHECK(human_bytes(5) == "5 B");
  CHECK(human_bytes(1.5 * (1 << 30)) == "1.5 GiB");
}
