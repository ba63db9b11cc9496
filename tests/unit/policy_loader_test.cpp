// Every loader error names FILE:LINE:COLUMN and what was expected.
#include <catch2/catch.hpp>

#include <string>

#include "saker/policy.hpp"

using saker::policy::LoadError;
using saker::policy::Policy;

namespace {

const std::string kHead = R"(version: 1
zones:
  - name: ae
    country: AE
  - name: eu
    region: EU
partitions:
  - name: gpu-ae
    zone: ae
    nodes: n[1-2]
)";

// Loads text, expects a LoadError at line:column whose message contains `needle`.
void expect_error(const std::string& text, int line, int column, const std::string& needle) {
  INFO(text);
  try {
    Policy::load_string(text, "t.yaml");
    FAIL("no error for: " << needle);
  } catch (const LoadError& e) {
    INFO(e.what());
    CHECK(e.line() == line);
    CHECK(e.column() == column);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK(std::string(e.what()).rfind("t.yaml:" + std::to_string(line) + ":" + std::to_string(column) + ": ", 0) == 0);
  }
}

}  // namespace

TEST_CASE("a minimal policy loads", "[policy][loader]") {
  const auto p = Policy::load_string(kHead);
  CHECK(p->summary().zones == 2);
  CHECK(p->summary().partitions == 1);
  CHECK(p->zone_of_node("n2") == "ae");
  CHECK_FALSE(p->zone_of_node("n3"));
  CHECK(p->revision().size() == 64);
}

TEST_CASE("the example policy file loads", "[policy][loader]") {
  const auto p = Policy::load_file(std::string(SAKER_TEST_DATA) + "/policy/two_zones.yaml");
  const auto s = p->summary();
  CHECK(s.datasets == 3);
  CHECK(s.grants == 2);
  CHECK(s.storage == 2);
  CHECK(p->zone_of_node("saker3") == "eu");
}

TEST_CASE("the revision ignores layout and comments but not content", "[policy][loader]") {
  const auto a = Policy::load_string(kHead);
  const auto b = Policy::load_string("# comment\n" + kHead + "\n\n");
  const auto c = Policy::load_string(R"(version: 1
zones: [{name: ae, country: AE}, {region: EU, name: eu}]
partitions: [{name: gpu-ae, zone: ae, nodes: "n1,n2"}]
)");
  CHECK(a->revision() == b->revision());
  CHECK(a->revision() == c->revision());
  std::string changed = kHead;
  changed.replace(changed.find("n[1-2]"), 6, "n[1-3]");
  CHECK(Policy::load_string(changed)->revision() != a->revision());
}

TEST_CASE("syntax and structure errors", "[policy][loader]") {
  expect_error("version: 1\nzones: [\n", 3, 1, "YAML syntax error");
  expect_error("", 1, 1, "empty");
  expect_error("- a\n- b\n", 1, 1, "the policy is a list");
  expect_error(kHead + "colour: blue\n", 11, 1, "unknown key 'colour' in the policy");
  expect_error(kHead + "partitions: []\n", 11, 1, "duplicate key 'partitions'");
  expect_error("version: 2\nzones: []\npartitions: []\n", 1, 10, "unsupported schema version 2");
  expect_error("version: one\nzones: []\npartitions: []\n", 1, 10, "a whole number");
  expect_error("version: 1\npartitions: []\n", 1, 1, "has no 'zones'");
  expect_error("version: 1\nzones: {a: 1}\npartitions: []\n", 2, 8, "zones is a mapping");
  expect_error("x: &a 1\ny: *a\n", 1, 4, "anchor or alias");
}

TEST_CASE("zone and partition errors", "[policy][loader]") {
  expect_error("version: 1\nzones:\n  - name: ae\n    country: AE\n  - name: ae\n    country: AE\npartitions: []\n", 5, 11,
               "duplicate zone 'ae'");
  expect_error("version: 1\nzones:\n  - name: ae\npartitions: []\n", 3, 5, "exactly one of country: or region:");
  expect_error("version: 1\nzones:\n  - name: ae\n    country: ae\npartitions: []\n", 4, 14, "upper-case");
  expect_error("version: 1\nzones:\n  - name: ae\n    country: AE\n    colour: red\npartitions: []\n", 5, 5,
               "unknown key 'colour' in a zone");
  expect_error(kHead + "  - name: gpu-eu\n    zone: de\n    nodes: n3\n", 12, 11, "unknown zone 'de'");
  expect_error(kHead + "  - name: gpu-ae\n    zone: ae\n    nodes: n3\n", 11, 11, "duplicate partition 'gpu-ae'");
  expect_error(kHead + "  - name: gpu-eu\n    zone: eu\n    nodes: n[3-\n", 13, 12, "bad hostlist 'n[3-'");
  expect_error(kHead + "  - name: gpu-eu\n    zone: eu\n    nodes: n2\n", 13, 12,
               "node n2 of partition gpu-eu is in zone eu but partition gpu-ae puts it in zone ae");
  expect_error(kHead + "  - name: x\n    zone: ae\n", 11, 5, "a partition has no 'nodes'");
  expect_error(kHead + "  - name: x\n    zone: ae\n    nodes: n1\n    cpu_only: maybe\n", 14, 15, "true or false");
  expect_error(kHead + "  - name: x\n    zone: ae\n    nodes: n1\n    cpu_only: true\n    gpus_per_node: 4\n", 15, 20,
               "cpu_only but has gpus_per_node");
  expect_error(kHead + "  - name: 'bad name'\n    zone: ae\n    nodes: n1\n", 11, 11, "bad partition name");
  const std::string two_defaults = R"(version: 1
zones: [{name: ae, country: AE}]
partitions:
  - {name: a, zone: ae, nodes: n1, default: true}
  - {name: b, zone: ae, nodes: n2, default: true}
)";
  expect_error(two_defaults, 5, 45, "both default");
  expect_error(kHead + "node_sets:\n  - name: s\n    zone: eu\n    nodes: n1\n", 14, 12, "node set s is in zone eu");
}

TEST_CASE("storage, dataset and classification errors", "[policy][loader]") {
  const std::string storage = kHead + "storage:\n  - name: fs\n    zone: ae\n    mounts: [/lustre/ae]\n";
  expect_error(kHead + "storage:\n  - name: fs\n    zone: ae\n    mounts: [relative]\n", 14, 14, "bad mount path");
  expect_error(storage + "  - name: fs2\n    zone: eu\n    mounts: [/lustre/ae/]\n", 17, 13, "also a mount of fs");
  expect_error(storage + "datasets:\n  - name: d\n    classification: secret\n", 17, 21,
               "unknown classification 'secret'; expected one of: public, internal, restricted");
  expect_error(storage + "datasets:\n  - name: d\n    classification: public\n    replicas: [nfs]\n", 18, 16,
               "names unknown storage 'nfs'");
  expect_error(storage + "datasets:\n  - name: d\n    classification: public\n    zones: [eu]\n    replicas: [fs]\n", 19,
               16, "lies in zone ae, where the dataset is not allowed");
  expect_error(storage + "datasets:\n  - name: d\n    classification: public\n    countries: [FR]\n", 18, 17,
               "no zone has country or region 'FR'");
  expect_error(storage + "datasets:\n  - name: d\n    classification: public\n  - name: d\n    classification: public\n",
               18, 11, "duplicate dataset 'd'");
  expect_error(storage + "datasets:\n  - name: d\n    classification: public\n    versions: [v1, v1]\n", 18, 20,
               "duplicate 'v1'");
  expect_error(storage + "datasets:\n  - name: d\n", 16, 5, "a dataset has no 'classification'");
  expect_error(kHead + "classifications:\n  - name: a\n  - name: a\n", 13, 11, "duplicate classification 'a'");
  // transit can ask for more than the default, never for less (off is a benchmark switch).
  expect_error(kHead + "classifications:\n  - {name: a, transit: off}\n", 12, 24, "bad transit 'off'");
  expect_error(kHead + "classifications:\n  - {name: a, transit: tls}\n", 12, 24, "auth (the default");
}

TEST_CASE("grant, rule and GPU errors", "[policy][loader]") {
  expect_error(kHead + "grants:\n  - users: [alice]\n    datasets: [\"pat[ients\"]\n", 13, 16, "never closed");
  expect_error(kHead + "grants:\n  - users: [alice]\n    datasets: [\"pat/x\"]\n", 13, 16, "character '/'");
  expect_error(kHead + "grants:\n  - datasets: [\"p*\"]\n", 12, 5, "a grant to nobody");
  expect_error(kHead + "grants:\n  - users: [alice]\n", 12, 5, "a grant that covers no data");
  expect_error(kHead + "grants:\n  - users: [alice]\n    classifications: [top]\n", 13, 23, "unknown classification 'top'");
  expect_error(kHead + "grants:\n  - user: [alice]\n", 12, 5, "unknown key 'user' in a grant");
  expect_error(kHead + "rules:\n  residency: strict\n", 12, 14, "enforce or audit");
  expect_error(kHead + "rules:\n  locality: maybe\n", 12, 13, "enforce, audit or off");
  expect_error(kHead + "rules:\n  placement: enforce\n", 12, 3, "unknown key 'placement' in rules");
  expect_error(kHead + "unknown_datasets: ignore\n", 11, 19, "deny, audit or allow");
  expect_error(kHead + "gpu:\n  max_per_job:\n    research: -1\n", 13, 15, "a whole number");
  expect_error(kHead + "gpu:\n  max_gpus: 3\n", 12, 3, "unknown key 'max_gpus' in gpu");
}

TEST_CASE("a missing file is a LoadError naming it", "[policy][loader]") {
  try {
    Policy::load_file("/nonexistent/policy.yaml");
    FAIL("no error");
  } catch (const LoadError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/policy.yaml") != std::string::npos);
    CHECK(std::string(e.what()).find("cannot open") != std::string::npos);
  }
}

// Limits: a hostile file is refused in milliseconds, at the place it goes wrong, before
// libyaml's scanner can go quadratic on it.
TEST_CASE("deep flow nesting is refused at the first level too deep", "[policy][loader][limits]") {
  for (const int levels : {33, 20000, 100000}) {
    const std::string text = "version: 1\nzones: " + std::string(static_cast<std::size_t>(levels), '[') +
                             std::string(static_cast<std::size_t>(levels), ']') + "\n";
    // "zones: " is 7 columns; the 33rd '[' is column 8 + 32.
    expect_error(text, 2, 40, "nesting deeper than 32 levels");
  }
  expect_error("version: 1\nzones: " + std::string(40, '{') + "\n", 2, 40, "nesting deeper than 32 levels");
}

TEST_CASE("deep block nesting is refused too", "[policy][loader][limits]") {
  std::string text = "version: 1\nzones:\n";
  for (int i = 0; i < 40; ++i) text += std::string(static_cast<std::size_t>(2 * i + 2), ' ') + "- \n";
  try {
    Policy::load_string(text, "t.yaml");
    FAIL("no error");
  } catch (const LoadError& e) {
    CHECK(std::string(e.what()).find("nesting deeper than 32 levels") != std::string::npos);
    CHECK(e.line() > 2);
  }
}

TEST_CASE("brackets in quotes and comments do not count as nesting", "[policy][loader][limits]") {
  const std::string brackets(100, '[');
  const std::string text = kHead + "# " + brackets + "\nnode_sets:\n  - name: \"" + brackets +
                           "\"\n    nodes: n1\n";
  try {
    Policy::load_string(text, "t.yaml");
  } catch (const LoadError& e) {
    CHECK(std::string(e.what()).find("nesting") == std::string::npos);
  }
}

TEST_CASE("over-long values and files are refused", "[policy][loader][limits]") {
  expect_error(kHead + "node_sets:\n  - name: " + std::string(70000, 'a') + "\n", 12, 11, "a value of 70000 bytes");
  saker::policy::LoadLimits small;
  small.max_bytes = 100;
  try {
    Policy::load_string(kHead + "\n" + std::string(200, '#'), "t.yaml", small);
    FAIL("no error");
  } catch (const LoadError& e) {
    CHECK(e.line() == 0);
    CHECK(std::string(e.what()).rfind("t.yaml: the file is larger than the limit of 100 bytes", 0) == 0);
  }
}
