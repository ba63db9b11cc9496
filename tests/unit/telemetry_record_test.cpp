// The record format: round trip, merging by job, and damaged files by class.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "telemetry/record.hpp"

using namespace saker::telemetry;

namespace {

NodeStepRecord sample_record(const std::string& step, const std::string& node, double start) {
  NodeStepRecord r;
  r.info.job = "42";
  r.info.step = step;
  r.info.node = node;
  r.info.user = "alice";
  r.info.uid = 1000;
  r.info.account = "ml team";  // a space: encoded
  r.info.start = start;
  r.info.end = start + 20;
  r.info.interval = 10;
  r.info.samples = 3;
  r.info.cpus = 2;
  r.info.source = "proc";
  r.info.note = "no Prometheus file: cannot write";
  r.info.stopped_by = "step-end";
  r.cpu.cpu_seconds = 20;
  r.cpu.efficiency = 0.5;
  r.cpu.util = summarize({49.5, 50.5});
  r.cpu.rss_hwm = 300u << 20;
  GpuSummary g;
  g.index = 3;
  g.util = summarize({0, 0, 10});
  g.idle_fraction = 2.0 / 3;
  g.energy_j = 1234.5;
  g.xid_errors = 2;
  g.last_xid = 79;
  g.last_error = "nvmlDeviceGetPowerUsage: GPU is lost";
  r.gpus.push_back(g);
  r.ranks.push_back({5, 10, 4096, 0, 8.0, 20.0, 0.4});
  r.series.push_back({"cpu", start, 10, {49.5, 50.5}});
  r.series.push_back({"gpu3", start, 10, {}});
  return r;
}

}  // namespace

TEST_CASE("summaries: nearest-rank percentiles", "[telemetry][record]") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  Stats s = summarize(v);
  CHECK(s.n == 100);
  CHECK(s.min == 1);
  CHECK(s.max == 100);
  CHECK(s.mean == Approx(50.5));
  CHECK(s.p50 == 50);
  CHECK(s.p90 == 90);
  CHECK(s.p99 == 99);
  CHECK(summarize({}).n == 0);
  CHECK(summarize({7}).p99 == 7);
}

TEST_CASE("records round-trip through the text format", "[telemetry][record]") {
  const auto r = sample_record("0", "n7", 1700000000.25);
  const std::string text = format_record(r);
  CHECK(text.find("account=ml%20team") != std::string::npos);
  auto parsed = parse_records("# saker-telemetry 1\n" + text);
  REQUIRE(parsed.problems.empty());
  REQUIRE(parsed.records.size() == 1);
  const auto& p = parsed.records[0];
  CHECK(p.info.account == "ml team");
  CHECK(p.info.note == "no Prometheus file: cannot write");
  CHECK(p.info.stopped_by == "step-end");
  CHECK(p.info.start == 1700000000.25);
  CHECK(p.info.uid == 1000);
  CHECK(p.cpu.efficiency == 0.5);
  CHECK(p.cpu.rss_hwm == 300u << 20);
  REQUIRE(p.gpus.size() == 1);
  CHECK(p.gpus[0].index == 3);
  CHECK(p.gpus[0].idle_fraction == Approx(2.0 / 3));
  CHECK(p.gpus[0].last_error == "nvmlDeviceGetPowerUsage: GPU is lost");
  CHECK(p.gpus[0].xid_errors == 2);
  CHECK(p.gpus[0].last_xid == 79);
  REQUIRE(p.ranks.size() == 1);
  CHECK(p.ranks[0].share == 0.4);
  REQUIRE(p.series.size() == 2);
  CHECK(p.series[0].values == std::vector<double>{49.5, 50.5});
  CHECK(p.series[1].values.empty());
}

TEST_CASE("records of several nodes and steps merge by job; a requeue's newer run wins", "[telemetry][record]") {
  std::string text = format_record(sample_record("1", "n2", 100)) + format_record(sample_record("0", "n1", 100)) +
                     format_record(sample_record("0", "n1", 500)) + format_record(sample_record("batch", "n1", 50)) +
                     format_record(sample_record("10", "n1", 100));
  auto parsed = parse_records(text);
  REQUIRE(parsed.records.size() == 5);
  auto latest = latest_per_step_and_node(parsed.records);
  REQUIRE(latest.size() == 4);
  CHECK(latest[0].info.step == "0");
  CHECK(latest[0].info.start == 500);
  CHECK(latest[1].info.step == "1");
  CHECK(latest[2].info.step == "10");
  CHECK(latest[3].info.step == "batch");
}

TEST_CASE("damaged record files: each bad block is skipped and named", "[telemetry][record]") {
  const std::string good = format_record(sample_record("0", "n1", 1));
  SECTION("a writer that stopped mid-block") {
    auto p = parse_records(good.substr(0, good.size() / 2) + "\n" + good);
    CHECK(p.records.size() == 1);
    REQUIRE(p.problems.size() == 1);
    CHECK(p.problems[0].find("no 'end' line") != std::string::npos);
    auto tail = parse_records(good.substr(0, good.rfind("end")));
    CHECK(tail.records.empty());
    CHECK(tail.problems.size() == 1);
  }
  SECTION("a number that is not one") {
    std::string bad = good;
    bad.replace(bad.find("efficiency=0.5"), 14, "efficiency=abc");
    auto p = parse_records(bad + good);
    CHECK(p.records.size() == 1);
    REQUIRE(p.problems.size() == 1);
    CHECK(p.problems[0].find("line 1") != std::string::npos);
    CHECK(p.problems[0].find("efficiency='abc'") != std::string::npos);
  }
  SECTION("not finite, not key=value, no identity") {
    std::string inf = good;
    inf.replace(inf.find("efficiency=0.5"), 14, "efficiency=inf");
    CHECK(parse_records(inf).records.empty());
    std::string nokv = good;
    nokv.replace(nokv.find("cpu cpu_seconds"), 3, "cpu garbage");
    CHECK(parse_records(nokv).records.empty());
    CHECK(parse_records("step job=1\ncpu efficiency=1\nend\n").records.empty());
  }
  SECTION("lines outside a block, unknown kinds, binary junk") {
    std::string junk = "end\nrank rank=1\n\x01\x02\xff\n";
    auto p = parse_records(junk + good);
    CHECK(p.records.size() == 1);
    CHECK(p.problems.size() == 2);
    std::string newer = good;
    newer.insert(newer.find("end\n"), "xid count=3\n");
    CHECK(parse_records(newer).records.size() == 1);
  }
  SECTION("empty and comment-only files") {
    CHECK(parse_records("").records.empty());
    CHECK(parse_records("# saker-telemetry 1\n").problems.empty());
  }
}

TEST_CASE("tokens and record paths", "[telemetry][record]") {
  CHECK(encode_token("") == "-");
  CHECK(decode_token("-").empty());
  CHECK(encode_token("a b\n%") == "a%20b%0A%25");
  CHECK(decode_token(encode_token("x=y z\"\\")) == "x=y z\"\\");
  CHECK(decode_token("%zz%4") == "%zz%4");  // malformed escapes stay as they are
  CHECK(record_path("/d", "42") == "/d/42.telemetry");
  CHECK(record_path("/d", "42_7") == "/d/42_7.telemetry");
  CHECK(record_path("/d", "42+1") == "/d/42+1.telemetry");
  for (const char* bad : {"", "../etc/passwd", "42/1", "abc", "42_", "4_2_3", "-1", "1 2"})
    CHECK_THROWS_AS(record_path("/d", bad), saker::Error);
}
