// The SHA-256 of a step's checkpoints in its OpenLineage end event (openlineage_outputs.hpp,
// hash_outputs): the digest saker-ckpt provenance states, read safely and within bounds.
// The attack cases play the job's user swapping files between the listing and the reading.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "ckpt_test_util.hpp"
#include "common/sha256.hpp"
#include "provenance/openlineage.hpp"
#include "provenance/openlineage_outputs.hpp"
#include "provenance/text.hpp"
#include "provenance_test_util.hpp"

namespace ol = saker::provenance::openlineage;
using saker::ckpt::testing::TempDir;

namespace {

constexpr std::int64_t kNs = 1000000000;
constexpr std::int64_t kStart = 1700000000;

// A file of `bytes` with modification time `mtime`; returns its SHA-256.
std::string make(const std::filesystem::path& p, const std::string& bytes, std::int64_t mtime) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  const timespec ts[2] = {{static_cast<time_t>(mtime), 0}, {static_cast<time_t>(mtime), 0}};
  ::utimensat(AT_FDCWD, p.c_str(), ts, 0);
  return saker::provenance::sha256_hex(bytes);
}

const ol::HashLimits kPlenty{1 << 20, 10000};

}  // namespace

TEST_CASE("openlineage: an output's SHA-256 is OpenLineage's dataset version and the checkpoint facet's sha256",
          "[openlineage]") {
  ol::StepEvent e;
  e.type = ol::EventType::complete;
  e.facts = saker::provenance::testing::sample_attestation();
  const std::string d(64, 'a');
  e.outputs = {{"/l/ckpt-000000000010.h5", 4096, 1700000001, d}, {"/l/ckpt-000000000011.h5", 1, 1700000002, ""}};
  const std::string j = ol::event_json(e);
  CHECK_THAT(j, Catch::Contains("{\"namespace\":\"file\",\"name\":\"/l/ckpt-000000000010.h5\",\"facets\":{\"version\":{"
                                "\"_producer\":"));
  CHECK_THAT(j, Catch::Contains("DatasetVersionDatasetFacet\",\"datasetVersion\":\"sha256:" + d + "\"}},\"outputFacets\""));
  CHECK_THAT(j, Catch::Contains("\"modified\":\"2023-11-14T22:13:21Z\",\"sha256\":\"" + d + "\"}}}"));
  // Without a digest: no version facet, no sha256 field.
  CHECK_THAT(j, Catch::Contains("{\"namespace\":\"file\",\"name\":\"/l/ckpt-000000000011.h5\",\"outputFacets\""));
  CHECK_THAT(j, Catch::Contains("\"modified\":\"2023-11-14T22:13:22Z\"}}}"));
}

TEST_CASE("openlineage: the listing's child hashes the checkpoints it found, newest first within the byte budget",
          "[openlineage]") {
  TempDir tmp;
  const auto dir = tmp / "run";
  std::filesystem::create_directories(dir / "elastic");
  const std::string a = make(dir / "ckpt-000000000010.h5", std::string(3000, 'a'), kStart + 1);
  const std::string b = make(dir / "elastic/ckpt-000000000020.h5", std::string(2000, 'b'), kStart + 2);
  const ol::Listing l = ol::list_checkpoints_as(dir.string(), ::geteuid(), ::getegid(), kStart * kNs, 10000, kPlenty);
  CHECK(l.note == "");
  REQUIRE(l.outputs.size() == 2);
  CHECK(l.outputs[0].sha256 == a);
  CHECK(l.outputs[1].sha256 == b);
  // Without limits nothing is read.
  CHECK(ol::list_checkpoints_as(dir.string(), ::geteuid(), ::getegid(), kStart * kNs, 10000).outputs[0].sha256.empty());
  // 4000 bytes: the newest (2000) is read, the older (3000) would pass the budget.
  std::vector<ol::Output> outs = ol::list_checkpoints(dir.string(), ::geteuid(), kStart * kNs).outputs;
  const std::string note = ol::hash_outputs(outs, dir.string(), ::geteuid(), {4000, 10000});
  CHECK(outs[0].sha256 == "");
  CHECK(outs[1].sha256 == b);
  CHECK(note == "no SHA-256 for 1 checkpoint(s): 1 over the 4000 bytes a step's end may read "
                "(saker-ckpt provenance FILE states it)");
}

TEST_CASE("openlineage attack: a checkpoint swapped for a link, another file or another size after the listing is "
          "not read", "[openlineage][attack]") {
  TempDir tmp;
  const auto dir = tmp / "run";
  std::filesystem::create_directories(dir / "sub");
  std::filesystem::create_directories(tmp / "elsewhere");
  make(dir / "ckpt-000000000001.h5", "one", kStart);
  make(dir / "sub/ckpt-000000000002.h5", "two", kStart);
  make(dir / "ckpt-000000000003.h5", "three", kStart);
  make(dir / "ckpt-000000000004.h5", "four", kStart);
  std::vector<ol::Output> outs = ol::list_checkpoints(dir.string(), ::geteuid(), kStart * kNs).outputs;
  REQUIRE(outs.size() == 4);
  // A secret of the same size and time: a link to it, at the file and at its directory.
  make(tmp / "elsewhere/ckpt-000000000002.h5", "TWO", kStart);
  make(tmp / "secret", "ONE", kStart);
  std::filesystem::remove(dir / "ckpt-000000000001.h5");
  REQUIRE(::symlink((tmp / "secret").c_str(), (dir / "ckpt-000000000001.h5").c_str()) == 0);
  std::filesystem::remove_all(dir / "sub");
  REQUIRE(::symlink((tmp / "elsewhere").c_str(), (dir / "sub").c_str()) == 0);
  make(dir / "ckpt-000000000003.h5", "three plus", kStart);  // rewritten: another size
  const std::string note = ol::hash_outputs(outs, dir.string(), ::geteuid(), kPlenty);
  CHECK(outs[0].sha256 == "");  // ckpt-000000000001.h5
  CHECK(outs[1].sha256 == "");  // ckpt-000000000003.h5
  CHECK(outs[2].sha256 == saker::provenance::sha256_hex("four"));
  CHECK(outs[3].sha256 == "");  // sub/ckpt-000000000002.h5
  CHECK_THAT(note, Catch::Contains("no SHA-256 for 3 checkpoint(s): 3 changed, replaced or unreadable since listed"));
}

TEST_CASE("openlineage: a read past its deadline is killed, and a hung hasher costs the digests, not the listing",
          "[openlineage]") {
  TempDir tmp;
  const auto dir = tmp / "run";
  std::filesystem::create_directories(dir);
  make(dir / "ckpt-000000000001.h5", "one", kStart);
  make(dir / "ckpt-000000000002.h5", "two", kStart + 1);
  // A hasher that never answers stands in for a read of a hung file system.
  const auto slow = tmp / "slow-sha256sum";
  std::ofstream(slow) << "#!/bin/sh\nexec sleep 60\n";
  std::filesystem::permissions(slow, std::filesystem::perms::owner_all);
  std::vector<ol::Output> outs = ol::list_checkpoints(dir.string(), ::geteuid(), kStart * kNs).outputs;
  const std::string note = ol::hash_outputs(outs, dir.string(), ::geteuid(), {1 << 20, 200}, slow.c_str());
  CHECK(outs[0].sha256 == "");
  CHECK(outs[1].sha256 == "");
  CHECK(note == "no SHA-256 for 2 checkpoint(s): 2 not read within 200 ms (saker-ckpt provenance FILE states it)");
  // The child reports the listing before it reads: slurmstepd's deadline keeps it.
  const ol::Listing l = ol::list_in_child(
      dir.string(), ::geteuid(), ::getegid(), 300, [&] { return ol::list_checkpoints(dir.string(), ::geteuid(), kStart * kNs); },
      [](ol::Listing&) {
        ::sleep(30);
        return std::string();
      });
  CHECK(l.outputs.size() == 2);
  CHECK_THAT(l.note, Catch::Contains("reading the checkpoints for their SHA-256 did not finish within 300 ms"));
}

TEST_CASE("openlineage attack: the child's digests name only listed checkpoints, as 64 hex digits", "[openlineage][attack]") {
  const std::string d(64, 'c');
  const ol::Listing l = ol::decode_listing("\n1\t2\tckpt-000000000001.h5\n1\t2\tckpt-000000000002.h5\nend\n"
                                           "sha256\t" + d + "\tckpt-000000000001.h5\n"
                                           "sha256\t" + std::string(64, 'C') + "\tckpt-000000000002.h5\n"
                                           "sha256\t" + d + "\t../ckpt-000000000009.h5\nhashed\tsome note\n",
                                           "/d");
  REQUIRE(l.outputs.size() == 2);
  CHECK(l.outputs[0].sha256 == d);
  CHECK(l.outputs[1].sha256 == "");
  CHECK(l.note == "some note");
  // A report cut short among the digests keeps the listing and says so.
  const ol::Listing cut = ol::decode_listing("\n1\t2\tckpt-000000000001.h5\nend\nsha256\t" + d, "/d");
  CHECK(cut.outputs.size() == 1);
  CHECK_THAT(cut.note, Catch::Contains("SHA-256 was cut short"));
  // encode and decode agree.
  ol::Listing full = l;
  full.note = "";
  const ol::Listing round = ol::decode_listing(ol::encode_listing(full, "/d") + ol::encode_digests(full, "/d", "n"), "/d");
  CHECK(round.outputs == l.outputs);
  CHECK(round.note == "n");
}
