// The record file (append, merge, ownership), the Prometheus text and the ranks'
// counter files, including what a job's user could plant in their directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "telemetry/comm_counters.hpp"
#include "telemetry/store.hpp"
#include "tests/unit/telemetry_test_util.hpp"

using namespace saker::telemetry;
using saker::telemetry::testing::TempDir;
using saker::telemetry::testing::write_file;

namespace {

NodeStepRecord small(const std::string& node) {
  NodeStepRecord r;
  r.info.job = "77";
  r.info.step = "0";
  r.info.node = node;
  r.info.user = "bob";
  r.info.account = "phys\"ics\\";
  r.cpu.efficiency = 0.25;
  GpuSummary g;
  g.index = 1;
  g.util.mean = 40;
  r.gpus.push_back(g);
  r.ranks.push_back({2, 1, 10, 0, 1, 4, 0.25});
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("records: every node appends to the job's one file", "[telemetry][store]") {
  TempDir dir;
  const std::string d = (dir / "records").string();
  std::string warning;
  append_record(d, "77", format_record(small("n1")), ::getuid() == 0 ? 1000 : 0, 0, &warning);
  append_record(d, "77", format_record(small("n2")), 0, 0, &warning);
  const std::string path = d + "/77.telemetry";
  auto parsed = parse_records(slurp(path));
  CHECK(parsed.problems.empty());
  REQUIRE(parsed.records.size() == 2);
  CHECK(parsed.records[1].info.node == "n2");
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0007) == 0);  // never world-readable
  if (::getuid() == 0 && warning.empty()) {
    char acl[128];
    CHECK(::getxattr(path.c_str(), "system.posix_acl_access", acl, sizeof acl) == 44);  // the owner's read entry
  }
}

TEST_CASE("records: a planted link or a bad job id is refused", "[telemetry][store]") {
  TempDir dir;
  write_file(dir / "target", "x");
  REQUIRE(::symlink((dir / "target").c_str(), (dir / "5.telemetry").c_str()) == 0);
  CHECK_THROWS_AS(append_record(dir.path().string(), "5", "step\n", 0, 0, nullptr), saker::Error);
  CHECK(slurp((dir / "target").string()) == "x");
  CHECK_THROWS_AS(append_record(dir.path().string(), "../5", "step\n", 0, 0, nullptr), saker::Error);
  CHECK_THROWS_AS(append_record("/proc/nonexistent/dir", "5", "step\n", 0, 0, nullptr), saker::Error);
}

TEST_CASE("prometheus: gauges labelled job, step, node, user, account; atomic file", "[telemetry][store]") {
  const std::string text = prometheus_text(small("n1"), true);
  CHECK(text.find("# TYPE saker_job_cpu_efficiency_ratio gauge\n") != std::string::npos);
  CHECK(text.find("saker_job_cpu_efficiency_ratio{job_id=\"77\",step=\"0\",node=\"n1\",user=\"bob\",account=\"phys\\\"ics\\\\\"} 0.25\n") !=
        std::string::npos);
  CHECK(text.find("saker_job_gpu_utilization_ratio{job_id=\"77\",step=\"0\",node=\"n1\",user=\"bob\",account=\"phys\\\"ics\\\\\",gpu=\"1\"} 0.4\n") !=
        std::string::npos);
  CHECK(text.find("saker_job_comm_allreduce_ratio{") != std::string::npos);
  CHECK(text.find("saker_job_running{") != std::string::npos);
  TempDir dir;
  write_prometheus(dir.path().string(), small("n1"), false);
  const std::string path = prometheus_path(dir.path().string(), small("n1").info);
  CHECK(path == dir.path().string() + "/saker_job_77_0_n1.prom");
  CHECK(slurp(path) == prometheus_text(small("n1"), false));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK_THROWS_AS(write_prometheus((dir / "missing").string(), small("n1"), false), saker::Error);
  // Pruning keeps fresh files and other nodes' files.
  write_file(dir / "saker_job_1_0_n2.prom", "x");
  prune_prometheus(dir.path().string(), "n1", 3600);
  CHECK(std::filesystem::exists(path));
  prune_prometheus(dir.path().string(), "n1", -1);
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::filesystem::exists(dir / "saker_job_1_0_n2.prom"));
}

TEST_CASE("comm counters: published by a rank, read by the sampler", "[telemetry][store]") {
  TempDir dir;
  ::setenv("SAKER_TELEMETRY_DIR", dir.path().c_str(), 1);
  {
    CommCountersPublisher p(3, 4);
    REQUIRE(p.active());
    p.allreduce_done(4096, 2'000'000);
    p.allreduce_done(4096, 1'000'000);
    p.stall();
    auto c = read_comm_counters(dir.path().string(), ::getuid());
    REQUIRE(c.size() == 1);
    CHECK(c[0].rank == 3);
    CHECK(c[0].world_size == 4);
    CHECK(c[0].allreduce_calls == 2);
    CHECK(c[0].allreduce_bytes == 8192);
    CHECK(c[0].allreduce_ns == 3'000'000);
    CHECK(c[0].stalls == 1);
    CHECK(c[0].closed_ns == 0);
    // A second publisher for the same rank does not take over the file.
    CommCountersPublisher again(3, 4);
    CHECK_FALSE(again.active());
  }
  CHECK(read_comm_counters(dir.path().string(), ::getuid())[0].closed_ns > 0);
  ::unsetenv("SAKER_TELEMETRY_DIR");
  CommCountersPublisher off(0, 1);
  CHECK_FALSE(off.active());
  off.allreduce_done(1, 1);  // no-op, no crash
}

TEST_CASE("comm counters: what a user could plant is not read", "[telemetry][store]") {
  TempDir dir;
  CommCounters good{};
  good.magic = CommCounters::kMagic;
  good.version = CommCounters::kVersion;
  good.rank = 1;
  auto put = [&](const std::string& name, const void* data, std::size_t n) {
    std::ofstream(dir / name, std::ios::binary).write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  };
  put("comm.1", &good, sizeof good);
  CommCounters wrong_rank = good;
  put("comm.2", &wrong_rank, sizeof wrong_rank);  // says rank 1
  CommCounters bad_magic = good;
  bad_magic.magic = 0;
  bad_magic.rank = 4;
  put("comm.4", &bad_magic, sizeof bad_magic);
  put("comm.5", &good, 10);                       // truncated
  put("comm.x", &good, sizeof good);              // not a rank
  write_file(dir / "secret", std::string(64, 's'));
  REQUIRE(::symlink((dir / "secret").c_str(), (dir / "comm.6").c_str()) == 0);
  REQUIRE(::mkfifo((dir / "comm.7").c_str(), 0600) == 0);  // would block a plain open
  auto c = read_comm_counters(dir.path().string(), ::getuid());
  REQUIRE(c.size() == 1);
  CHECK(c[0].rank == 1);
  if (::getuid() == 0) CHECK(read_comm_counters(dir.path().string(), 4242).size() == 1);  // root-owned files count
  CHECK(read_comm_counters((dir / "none").string(), 0).empty());
}
