#include <catch2/catch.hpp>

#include <fstream>

#include "ckpt/commit.hpp"
#include "ckpt_test_util.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {
std::vector<std::uint64_t> steps_in(const std::filesystem::path& dir) {
  std::vector<std::uint64_t> out;
  for (const auto& f : list_checkpoints(dir)) out.push_back(describe(f).step);
  return out;
}
}  // namespace

TEST_CASE("retention keeps the last K plus every Mth step", "[ckpt][retention]") {
  TempDir dir;
  Options o;
  o.keep_last = 2;
  o.keep_every = 4;
  Checkpointer ck(dir.path(), o);
  for (std::uint64_t s = 1; s <= 10; ++s) ck.save(make_state(s, 16));
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{4, 8, 9, 10});
  CHECK(commit::read_latest(dir.path()) == std::optional<std::string>("ckpt-000000000010.h5"));
}

TEST_CASE("keep_last 0 keeps everything; prune never removes the newest", "[ckpt][retention]") {
  TempDir dir;
  {
    Options o;
    o.keep_last = 0;
    Checkpointer ck(dir.path(), o);
    for (std::uint64_t s = 1; s <= 4; ++s) ck.save(make_state(s, 16));
  }
  CHECK(steps_in(dir.path()).size() == 4);
  CHECK(prune(dir.path(), 1, 0).size() == 3);
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{4});
  CHECK(prune(dir.path(), 1, 0).empty());
}

TEST_CASE("shard files go with their checkpoint; orphans of failed saves are removed", "[ckpt][retention]") {
  TempDir dir;
  Options o;
  o.keep_last = 1;
  Checkpointer ck(dir.path(), o);
  ck.save(make_state(1, 16));
  // An orphan shard of a save that never committed, older than the newest checkpoint.
  std::ofstream(dir / "ckpt-000000000000.shard-00001.h5") << "partial";
  // A shard of a save in progress (newer than the newest checkpoint) must survive.
  std::ofstream(dir / "ckpt-000000000009.shard-00001.h5") << "in progress";
  ck.save(make_state(2, 16));
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt-000000000000.shard-00001.h5"));
  CHECK(std::filesystem::exists(dir / "ckpt-000000000009.shard-00001.h5"));
  CHECK(steps_in(dir.path()) == std::vector<std::uint64_t>{2});
}

TEST_CASE("stale temporary files of dead writers are cleaned up, live ones kept", "[ckpt][retention]") {
  TempDir dir;
  const std::string host = commit::hostname();
  const auto dead = dir / (".ckpt-000000000001.h5.tmp." + host + ".999999999.0000beef");
  const auto live = dir / (".ckpt-000000000002.h5.tmp." + host + "." + std::to_string(::getpid()) + ".0000beef");
  const auto other_old = dir / ".ckpt-000000000003.h5.tmp.otherhost.12.0000beef";
  const auto other_new = dir / ".ckpt-000000000004.h5.tmp.otherhost.13.0000beef";
  for (const auto& p : {dead, live, other_old, other_new}) std::ofstream(p) << "x";
  std::filesystem::last_write_time(other_old, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  Checkpointer ck(dir.path());
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  CHECK_FALSE(std::filesystem::exists(other_old));
  CHECK(std::filesystem::exists(other_new));
}
