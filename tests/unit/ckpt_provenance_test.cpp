// Provenance in every checkpoint (ckpt/provenance.hpp) and its export and chain check
// (ckpt/provenance_export.hpp). The tampering cases play the job's user, who may rewrite
// a checkpoint file completely (the keyless checksums included: manifest::seal) but holds
// no site key.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <ctime>

#include "ckpt/manifest.hpp"
#include "ckpt/provenance.hpp"
#include "ckpt/provenance_export.hpp"
#include "ckpt_test_util.hpp"
#include "provenance/text.hpp"
#include "provenance_test_util.hpp"

namespace fs = std::filesystem;
namespace pv = saker::provenance;
namespace prov = saker::ckpt::provenance;
using namespace saker::ckpt;
using saker::ckpt::testing::make_state;
using saker::ckpt::testing::TempDir;
using saker::ckpt::testing::write_file;

namespace {

// The environment a task of job 4242, step 0, gets from spank_saker.so.
struct JobEnv {
  TempDir dir;
  pv::testing::KeyPair site = pv::testing::make_keys(dir.path(), "site");
  std::string attestation = (dir / "job-4242.0.att").string();
  explicit JobEnv(const pv::Attestation& a = pv::testing::sample_attestation()) {
    write_file(attestation, pv::testing::signed_text(a, site), 0400);
    ::setenv("SAKER_ATTESTATION", attestation.c_str(), 1);
    ::setenv("SLURM_JOB_ID", "4242", 1);
    ::setenv("SLURM_STEP_ID", "0", 1);
    ::unsetenv("SAKER_CKPT_PARENTS");
  }
  ~JobEnv() {
    ::unsetenv("SAKER_ATTESTATION");
    ::unsetenv("SLURM_JOB_ID");
    ::unsetenv("SLURM_STEP_ID");
  }
  pv::PublicSiteKey pub() const { return pv::read_public_key(site.public_path); }
};

fs::path save_one(const fs::path& dir, std::uint64_t step) {
  Checkpointer ck(dir);
  return ck.save(make_state(step)).file;
}

prov::Record record_of(const fs::path& file) { return prov::decode(describe(file).provenance, file.string()); }

// The user's full rewrite: a new provenance record, every keyless checksum recomputed.
void reseal(const fs::path& file, manifest::Manifest m) {
  std::string bytes = *saker::file::read(file.string());
  std::fill(bytes.begin() + manifest::kHeaderBytes, bytes.begin() + static_cast<std::ptrdiff_t>(m.user_block), '\0');
  write_file(file, bytes, 0600);
  manifest::seal(file, m, nullptr);
}

void rewrite_provenance(const fs::path& file, const prov::Record& r) {
  manifest::Opened o = manifest::open_checked(file);
  o.manifest.provenance = prov::encode(r);
  reseal(file, o.manifest);
}

std::string problems(const prov::ChainCheck& c) {
  std::string s;
  for (const auto& p : c.problems) s += p + "\n";
  return s;
}

}  // namespace

TEST_CASE("provenance: a record survives encode and decode; malformed ones are refused", "[provenance]") {
  prov::Record r;
  r.job_id = "12";
  r.step_id = "batch";
  r.attestation = "saker-attestation 1\nwith spaces and % signs\n";
  r.enforced = {"patients@v3", "imagenet"};
  r.code = {"/home/a/train.py", std::string(64, 'a'), std::string(40, 'b'), "/usr/bin/python3.11"};
  r.parents = {{std::string(64, 'c'), "run one", 100, "/ckpt/ckpt-000000000100.h5"}};
  CHECK(prov::decode(prov::encode(r), "t") == r);
  prov::Record empty;
  CHECK(prov::decode(prov::encode(empty), "t") == empty);
  const std::string text = prov::encode(r);
  CHECK_THROWS_AS(prov::decode(text + "parent x\n", "t"), saker::Error);
  std::string bad_digest = text;
  bad_digest.replace(bad_digest.find("cccc"), 4, "zzzz");
  CHECK_THROWS_WITH(prov::decode(bad_digest, "t"), Catch::Contains("64 hex digits"));
}

TEST_CASE("provenance: every checkpoint carries the attestation, the code, the job and the flag datasets apart",
          "[provenance]") {
  JobEnv job;
  TempDir d;
  const fs::path file = save_one(d.path(), 10);
  const prov::Record r = record_of(file);
  CHECK(r.job_id == "4242");
  CHECK(r.step_id == "0");
  CHECK(r.attestation == *saker::file::read(job.attestation));
  CHECK(r.enforced == std::vector<std::string>{"patients@v3", "imagenet@2012"});
  CHECK(r.code.path == fs::read_symlink("/proc/self/exe").string());
  CHECK(r.code.sha256 == prov::file_sha256(r.code.path));
  CHECK(r.parents.empty());
  // The --lineage datasets stay the manifest's own field, apart from the enforced ones.
  CHECK(format_lineage(describe(file).lineage) == "imagenet@2012,patients@v3");
  CHECK(verify(file).ok);
}

TEST_CASE("provenance: without an attestation the checkpoint says why", "[provenance]") {
  ::unsetenv("SAKER_ATTESTATION");
  TempDir d;
  const prov::Record r = record_of(save_one(d.path(), 1));
  CHECK(r.attestation.empty());
  CHECK_THAT(r.attestation_note, Catch::Contains("no SAKER_ATTESTATION"));
  ::setenv("SAKER_ATTESTATION", (d / "missing").c_str(), 1);
  CHECK_THAT(record_of(save_one(d.path(), 2)).attestation_note, Catch::Contains("cannot read SAKER_ATTESTATION"));
  ::unsetenv("SAKER_ATTESTATION");
}

TEST_CASE("provenance: a resume and a fine-tune name their parent by digest; SAKER_CKPT_PARENTS adds more",
          "[provenance]") {
  JobEnv job;
  TempDir d;
  const fs::path first = save_one(d / "run1", 100);
  const std::string first_digest = prov::file_sha256(first);
  {
    Checkpointer ck(d / "run1");
    REQUIRE(ck.load_latest());
    const fs::path resumed = ck.save(make_state(200)).file;
    const auto r = record_of(resumed);
    REQUIRE(r.parents.size() == 1);
    CHECK(r.parents[0].sha256 == first_digest);
    CHECK(r.parents[0].step == 100);
  }
  {
    Checkpointer other(d / "finetune");
    other.load(first);  // another run's checkpoint as the starting point
    const std::string trial = std::string(64, 'e');
    // A launcher that names what the program also loaded (saker-sweep's next rung): once.
    ::setenv("SAKER_CKPT_PARENTS", ("sha256:" + trial + ",sha256:" + first_digest).c_str(), 1);
    const auto r = record_of(other.save(make_state(1)).file);
    ::unsetenv("SAKER_CKPT_PARENTS");
    REQUIRE(r.parents.size() == 2);
    CHECK(r.parents[0].sha256 == first_digest);
    CHECK(r.parents[1].sha256 == trial);
  }
}

TEST_CASE("provenance: the in-toto statement names the checkpoint's digest, the dependencies and the attestation",
          "[provenance]") {
  JobEnv job;
  TempDir d;
  const fs::path first = save_one(d / "a", 1);
  Checkpointer ck(d / "b");
  ck.load(first);
  const fs::path child = ck.save(make_state(2)).file;
  const std::string s = prov::statement_json(child);
  CHECK_THAT(s, Catch::Contains("\"_type\":\"https://in-toto.io/Statement/v1\"") &&
                    Catch::Contains("\"predicateType\":\"https://slsa.dev/provenance/v1\"") &&
                    Catch::Contains("{\"name\":\"" + child.filename().string() + "\",\"digest\":{\"sha256\":\"" +
                                    prov::file_sha256(child) + "\"}}") &&
                    Catch::Contains("\"name\":\"dataset:patients@v3\"") && Catch::Contains("\"enforced\":true") &&
                    Catch::Contains("\"name\":\"code:") && Catch::Contains("\"sha256\":\"" + prov::file_sha256(first) + "\"") &&
                    Catch::Contains("\"jobId\":\"4242\"") && Catch::Contains("application/vnd.dsse.envelope.v1+json"));
  // A dataset given only by flag is recorded, and said not to be enforced.
  const pv::Attestation no_imagenet = [] {
    auto a = pv::testing::sample_attestation();
    a.datasets.pop_back();
    return a;
  }();
  JobEnv job2(no_imagenet);
  const std::string s2 = prov::statement_json(save_one(d / "c", 1));
  CHECK_THAT(s2, Catch::Contains("\"name\":\"dataset:imagenet@2012\",\"uri\":\"saker-dataset:imagenet@2012\","
                                 "\"annotations\":{\"enforced\":false"));
}

TEST_CASE("provenance --verify: a genuine chain verifies, parents found by digest", "[provenance]") {
  JobEnv job;
  TempDir d;
  const fs::path parent = save_one(d / "run1", 1);
  Checkpointer ck(d / "run2");
  ck.load(parent);
  const fs::path child = ck.save(make_state(2)).file;
  const auto c = prov::verify_chain(child, job.pub(), {d / "run1"});
  CHECK(problems(c) == "");
  CHECK(c.checked.size() == 2);
  // Without the parent's directory the parent is not followed; with it gone, the chain breaks.
  CHECK(prov::verify_chain(child, job.pub()).ok());
  fs::remove(parent);
  CHECK_THAT(problems(prov::verify_chain(child, job.pub(), {d / "run1"})), Catch::Contains("the chain is broken"));
}

TEST_CASE("provenance --verify attack: what the job's user can do to a checkpoint is refused with a reason",
          "[provenance][attack]") {
  JobEnv job;
  TempDir d;
  const fs::path file = save_one(d.path(), 5);
  const pv::PublicSiteKey pub = job.pub();
  REQUIRE(prov::verify_chain(file, pub).ok());
  const prov::Record good = record_of(file);
  auto refused = [&](const prov::Record& r, const std::string& why) {
    rewrite_provenance(file, r);
    REQUIRE(verify(file).ok);  // the rewrite is self-consistent: only the provenance check can tell
    CHECK_THAT(problems(prov::verify_chain(file, pub)), Catch::Contains(why));
  };
  SECTION("a dataset removed from the provenance") {
    prov::Record r = good;
    r.enforced.erase(r.enforced.begin());
    refused(r, "dataset patients@v3 of the signed attestation is missing");
  }
  SECTION("a dataset removed from the attestation itself") {
    prov::Record r = good;
    pv::Envelope e = pv::parse_envelope(r.attestation, "t");
    e.payload.erase(e.payload.find("dataset=patients"), e.payload.find('\n', e.payload.find("dataset=patients")) -
                                                             e.payload.find("dataset=patients") + 1);
    r.attestation = pv::format_envelope(e);
    r.enforced.erase(r.enforced.begin());
    refused(r, "signature does not match");
  }
  SECTION("each field of the signed payload edited") {
    const pv::Envelope e0 = pv::parse_envelope(good.attestation, "t");
    for (const char* field : {"job_id=", "user=", "account=", "partition=", "zone=", "nodes=", "time_unix=", "audit_head="}) {
      prov::Record r = good;
      pv::Envelope e = e0;
      e.payload.insert(e.payload.find(field) + std::strlen(field), "1");
      r.attestation = pv::format_envelope(e);
      refused(r, "signature does not match");
    }
  }
  SECTION("a flipped signature byte") {
    prov::Record r = good;
    pv::Envelope e = pv::parse_envelope(r.attestation, "t");
    e.signature[17] = static_cast<char>(e.signature[17] ^ 0x80);
    r.attestation = pv::format_envelope(e);
    refused(r, "signature does not match");
  }
  SECTION("an attestation the user signed with a key of their own") {
    TempDir k;
    prov::Record r = good;
    r.attestation = pv::testing::signed_text(pv::testing::sample_attestation(), pv::testing::make_keys(k.path(), "own"));
    refused(r, "not the given site key");
  }
  SECTION("the attestation removed") {
    prov::Record r = good;
    r.attestation.clear();
    refused(r, "unattested");
  }
  SECTION("the whole record removed") {
    manifest::Opened o = manifest::open_checked(file);
    o.manifest.provenance.clear();
    reseal(file, o.manifest);
    CHECK_THAT(problems(prov::verify_chain(file, pub)), Catch::Contains("no provenance record"));
  }
  SECTION("a byte of the record changed without recomputing the checksums") {
    manifest::Opened o = manifest::open_checked(file);
    const auto at = o.text.find("4242");
    std::string bytes = *saker::file::read(file.string());
    bytes[manifest::kHeaderBytes + at] = '5';
    write_file(file, bytes, 0600);
    CHECK_THAT(problems(prov::verify_chain(file, pub)), Catch::Contains("integrity"));
  }
}

TEST_CASE("provenance --verify attack: another job's attestation on this checkpoint", "[provenance][attack]") {
  JobEnv job(pv::testing::sample_attestation("4243"));  // the attestation of job 4243, in job 4242's task
  TempDir d;
  const fs::path file = save_one(d.path(), 1);
  CHECK_THAT(problems(prov::verify_chain(file, job.pub())), Catch::Contains("is of job 4243") && Catch::Contains("another job"));
  // Another step of the same job.
  ::setenv("SLURM_STEP_ID", "3", 1);
  pv::Attestation a = pv::testing::sample_attestation("4242");
  write_file(job.attestation, pv::testing::signed_text(a, job.site), 0600);
  const fs::path other = save_one(d.path(), 2);
  CHECK_THAT(problems(prov::verify_chain(other, job.pub())), Catch::Contains("another step"));
  // An attestation of a step that started after the checkpoint was written.
  ::setenv("SLURM_STEP_ID", "0", 1);
  a.time_unix = std::time(nullptr) + 3600;
  write_file(job.attestation, pv::testing::signed_text(a, job.site), 0600);
  CHECK_THAT(problems(prov::verify_chain(save_one(d.path(), 3), job.pub())), Catch::Contains("attached afterwards"));
}

TEST_CASE("provenance --verify: another site's key is named", "[provenance][attack]") {
  JobEnv job;
  TempDir d, k;
  const fs::path file = save_one(d.path(), 1);
  const auto other = pv::testing::make_keys(k.path(), "other-site");
  CHECK_THAT(problems(prov::verify_chain(file, pv::read_public_key(other.public_path))), Catch::Contains("not the given site key"));
}

TEST_CASE("provenance: every byte of the record is under the manifest's checksum", "[provenance][integrity]") {
  JobEnv job;
  TempDir d;
  const fs::path file = save_one(d.path(), 1);
  const std::string original = *saker::file::read(file.string());
  const manifest::Opened o = manifest::open_checked(file);
  const auto from = manifest::kHeaderBytes + o.text.find("\nprovenance ") + 1;
  const auto to = manifest::kHeaderBytes + o.text.find('\n', from - manifest::kHeaderBytes);
  REQUIRE(to > from + 500);  // the record with its attestation
  std::size_t detected = 0, tried = 0;
  for (std::size_t at = from; at < to; ++at, ++tried) {
    std::string bytes = original;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x04);
    write_file(file, bytes, 0600);
    if (!verify(file).ok) ++detected;
  }
  CHECK(detected == tried);
  write_file(file, original, 0600);
  CHECK(verify(file).ok);
}
