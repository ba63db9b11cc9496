// saker-ckpt find (ckpt/find.hpp): every checkpoint derived from a dataset, through the
// site's attestation, the flag lineage, and parent digests over generations, from real
// checkpoints written by libsaker_ckpt (resume, fine-tune from another run).
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "ckpt/find.hpp"
#include "ckpt_test_util.hpp"
#include "provenance_test_util.hpp"
#include "saker/ckpt.hpp"

namespace fs = std::filesystem;
namespace pv = saker::provenance;
using namespace saker::ckpt;
using saker::ckpt::testing::make_state;
using saker::ckpt::testing::TempDir;
using saker::ckpt::testing::write_file;

namespace {

State with_lineage(std::uint64_t step, std::vector<DatasetVersion> lineage) {
  State st = make_state(step, 64);
  st.lineage = std::move(lineage);
  return st;
}

// One row per found file: "DIR/STEP gGENERATION WHY[ unpinned]".
std::vector<std::string> rows(const find::Result& r, const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& f : r.found)
    out.push_back(fs::relative(f.file.parent_path(), root).string() + "/" + std::to_string(f.step) + " g" +
                  std::to_string(f.generation) + " " + f.why + (f.version_unpinned ? " unpinned" : ""));
  std::sort(out.begin(), out.end());
  return out;
}

find::Result query(const fs::path& root, const std::string& dataset) {
  return find::derived_from({root}, saker::policy::parse_dataset_list(dataset).at(0));
}

}  // namespace

TEST_CASE("find: the attestation's datasets, the flag lineage and every descendant by digest", "[find]") {
  TempDir d;
  const fs::path root = d / "ckpts";
  {  // run1, a job of the site: the attestation enforces patients@v3 and imagenet@2012
    const auto site = pv::testing::make_keys(d.path(), "site");
    const fs::path att = d / "job.att";
    write_file(att, pv::testing::signed_text(pv::testing::sample_attestation(), site), 0400);
    ::setenv("SAKER_ATTESTATION", att.c_str(), 1);
    Checkpointer first(root / "run1");
    first.save(with_lineage(100, {}));
    Checkpointer again(root / "run1");
    REQUIRE(again.load_latest());
    again.save(with_lineage(200, {}));  // a resume: parent step 100
    ::unsetenv("SAKER_ATTESTATION");
  }
  {  // a fine-tune of run1's step 100 on cifar, then its own resume (no attestation: outside Slurm)
    Checkpointer tune(root / "sweep" / "trial-0");
    tune.load(root / "run1" / list_checkpoints(root / "run1").front().filename());
    tune.save(with_lineage(1, {{"cifar", ""}}));
    Checkpointer again(root / "sweep" / "trial-0");
    REQUIRE(again.load_latest());
    again.save(with_lineage(2, {{"cifar", ""}}));
  }
  Checkpointer(root / "other").save(with_lineage(5, {{"imagenet", "2012"}}));
  Checkpointer(root / "unpinned").save(with_lineage(7, {{"patients", ""}}));

  CHECK(rows(query(root, "patients@v3"), root) ==
        std::vector<std::string>{"run1/100 g0 enforced patients@v3", "run1/200 g0 enforced patients@v3",
                                 "sweep/trial-0/1 g1 parent " + (root / "run1" / list_checkpoints(root / "run1").front().filename()).string(),
                                 "sweep/trial-0/2 g2 parent " + list_checkpoints(root / "sweep" / "trial-0").front().string(),
                                 "unpinned/7 g0 by flag patients unpinned"});
  const auto v2 = rows(query(root, "patients@v2"), root);
  CHECK(v2 == std::vector<std::string>{"unpinned/7 g0 by flag patients unpinned"});
  CHECK(rows(query(root, "cifar"), root) ==
        std::vector<std::string>{"sweep/trial-0/1 g0 by flag cifar",
                                 "sweep/trial-0/2 g0 by flag cifar"});
  const auto imagenet = query(root, "imagenet");
  CHECK(imagenet.found.size() == 5);  // run1 (2), other, and the fine-tune's two through run1
  CHECK(imagenet.examined == 6);
  CHECK(query(root, "telemetry").found.empty());
  for (const auto& f : imagenet.found) CHECK(f.sha256.size() == 64);
}

TEST_CASE("find: a damaged checkpoint is named as not judged, and the JSON says so", "[find]") {
  TempDir d;
  const fs::path root = d / "ckpts";
  Checkpointer ck(root);
  const fs::path good = ck.save(with_lineage(1, {{"patients", "v3"}})).file;
  const fs::path bad = ck.save(with_lineage(2, {{"patients", "v3"}})).file;
  fs::resize_file(bad, 100);  // cut: its manifest cannot be read
  const auto r = query(root, "patients@v3");
  REQUIRE(r.found.size() == 1);
  CHECK(r.found[0].file == good);
  REQUIRE(r.unreadable.size() == 1);
  CHECK(r.unreadable[0].rfind(bad.string() + ": ", 0) == 0);
  const auto dataset = saker::policy::parse_dataset_list("patients@v3").at(0);
  CHECK(find::table(dataset, r).find("UNREADABLE  " + bad.string()) != std::string::npos);
  CHECK(find::table(dataset, r).find("1 of 2 checkpoint(s) derived from patients@v3; 1 could not be judged") !=
        std::string::npos);
  CHECK(find::json(dataset, r).find("\"unreadable\":[\"" + bad.string()) != std::string::npos);
  CHECK_THROWS_WITH(query(d / "nosuch", "x"), Catch::Contains("is not a directory"));
}
