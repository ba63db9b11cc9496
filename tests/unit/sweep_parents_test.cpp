// A trial's segments name what they resume from (sweep/parents.hpp): SAKER_CKPT_PARENTS in
// the command's environment, the SHA-256 of the newest checkpoint of the trial's lineage
// that verifies, so that a program that does not load it through libsaker_ckpt still
// records its parent, and saker-ckpt find and provenance trace the trial.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <catch2/catch.hpp>

#include "ckpt/provenance.hpp"
#include "ckpt_test_util.hpp"
#include "saker/ckpt.hpp"
#include "sweep/parents.hpp"
#include "sweep/worker.hpp"

using namespace saker::sweep;
using saker::ckpt::testing::TempDir;

namespace {

std::string env_of(const Command& c, const std::string& name) {
  for (const auto& [k, v] : c.env)
    if (k == name) return v;
  return "";
}

// A trainer that never loads anything: it saves a checkpoint at {budget} in
// SAKER_CKPT_DIR (with the parents in its environment, as libsaker_ckpt reads them) and
// reports loss q/budget.
int save_fresh(const Command& c) {
  const std::uint64_t budget = std::stoull(env_of(c, "SAKER_SWEEP_BUDGET"));
  const std::string parents = env_of(c, "SAKER_CKPT_PARENTS");
  if (parents.empty()) ::unsetenv("SAKER_CKPT_PARENTS");
  else ::setenv("SAKER_CKPT_PARENTS", parents.c_str(), 1);
  saker::ckpt::Checkpointer ck(env_of(c, "SAKER_CKPT_DIR"));
  saker::ckpt::State st;
  st.step = budget;
  std::vector<std::byte> w(64, std::byte{static_cast<unsigned char>(budget)});
  st.tensors.push_back(saker::ckpt::Tensor::owning("w", saker::ckpt::DType::u8, {64}, w));
  ck.save(st);
  ::unsetenv("SAKER_CKPT_PARENTS");
  const double q = std::stod(c.argv.at(1));
  std::ofstream(env_of(c, "SAKER_METRICS_FILE"), std::ios::app) << "step=" << budget << " loss=" << q / budget << "\n";
  return 0;
}

}  // namespace

TEST_CASE("a promoted trial's next rung names its checkpoint as parent; a first segment names none", "[sweep][parents]") {
  ::unsetenv("SAKER_CKPT_PARENTS");
  TempDir dir;
  const Spec s = load_string(
      "version: 1\nname: p\ndir: state\ncommand: [train, '{q}', '{budget}']\nspace: {q: {grid: [4, 1, 3, 2]}}\n"
      "metric: {name: loss}\nbudget: {steps: 100}\nearly_stopping: {rule: asha, min_steps: 25, reduction: 4}\n",
      "p.yaml", dir.path());
  const Store store(s.dir);
  std::map<std::string, std::string> seen;  // "trial/budget" -> SAKER_CKPT_PARENTS
  const auto run = [&](const Command& c, const std::filesystem::path&) {
    seen[env_of(c, "SAKER_TRIAL") + "/" + env_of(c, "SAKER_SWEEP_BUDGET")] = env_of(c, "SAKER_CKPT_PARENTS");
    return save_fresh(c);
  };
  std::ostringstream out;
  for (std::size_t t = 0; t < 4; ++t) REQUIRE(run_worker(s, store, {"3_" + std::to_string(t), t, run}, out) == 0);
  INFO(out.str());
  REQUIRE(store.load(1).state == State::completed);  // q=1: the best, promoted to 100 steps
  CHECK(seen.size() == 5);
  for (const char* first : {"0/25", "1/25", "2/25", "3/25"}) CHECK(seen[first] == "");
  const auto rung0 = s.lineage(1) / "ckpt-000000000025.h5";
  const std::string digest = saker::ckpt::provenance::file_sha256(rung0);
  CHECK(seen["1/100"] == "sha256:" + digest);
  // The rung-1 checkpoint records it, though the program loaded nothing.
  const auto rec = saker::ckpt::provenance::decode(saker::ckpt::describe(s.lineage(1) / "ckpt-000000000100.h5").provenance, "t");
  REQUIRE(rec.parents.size() == 1);
  CHECK(rec.parents[0].sha256 == digest);
}

TEST_CASE("segment parents: a warm start for a first segment, then the newest checkpoint that verifies", "[sweep][parents]") {
  TempDir dir;
  const auto lineage = dir / "trial-0";
  CHECK(segment_parents(lineage, "") == "");  // no lineage yet: a first segment
  CHECK_FALSE(resume_point(lineage));
  const std::string base = "sha256:" + std::string(64, 'b');
  CHECK(segment_parents(lineage, base) == base);
  std::filesystem::create_directories(lineage);
  for (std::uint64_t step : {10, 20}) {
    saker::ckpt::Checkpointer ck(lineage);
    saker::ckpt::State st;
    st.step = step;
    st.tensors.push_back(saker::ckpt::Tensor::owning("w", saker::ckpt::DType::u8, {8}, std::vector<std::byte>(8)));
    ck.save(st);
  }
  const auto c10 = lineage / "ckpt-000000000010.h5", c20 = lineage / "ckpt-000000000020.h5";
  CHECK(*resume_point(lineage) == c20);
  const std::string d10 = saker::ckpt::provenance::file_sha256(c10), d20 = saker::ckpt::provenance::file_sha256(c20);
  // A resumed segment starts from its lineage (which descends from any warm start) alone.
  CHECK(segment_parents(lineage, base) == "sha256:" + d20);
  // A damaged newest checkpoint is not what a resume loads: the one before it is the parent.
  {
    std::fstream f(c20, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-16, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0xff);
    f.seekp(-16, std::ios::end);
    f.put(c);
  }
  CHECK(*resume_point(lineage) == c10);
  CHECK(segment_parents(lineage, "") == "sha256:" + d10);
}
