// Who may read a checkpoint (issue 28): files 0600 and the directories the library creates
// 0700 by default, whatever the umask; 0640 and 0750 only by explicit choice; temporary
// files never adopt a file or a symbolic link someone planted.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "ckpt/commit.hpp"
#include "ckpt_test_util.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

unsigned mode_of(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? static_cast<unsigned>(st.st_mode) & 07777 : 0;
}

// Sets the umask for a scope: 0 would let a plain open(..., 0666) make world-writable files.
struct Umask {
  mode_t old;
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
};

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("ckpt modes: a fresh checkpoint is 0600 in 0700 directories whatever the umask", "[ckpt][modes]") {
  TempDir root;
  const auto dir = root / "runs/a";
  for (mode_t mask : {mode_t{0}, mode_t{022}}) {
    INFO("umask " << mask);
    Umask u(mask);
    Checkpointer ck(dir, Options{});
    ck.save(make_state(10 + mask));
    CHECK(mode_of(root / "runs") == 0700);
    CHECK(mode_of(dir) == 0700);
    for (const auto& f : list_checkpoints(dir)) CHECK(mode_of(f) == 0600);
    CHECK(mode_of(dir / "latest") == 0600);
  }
}

TEST_CASE("ckpt modes: 0640 files and 0750 directories only by explicit choice", "[ckpt][modes]") {
  TempDir root;
  const auto dir = root / "shared/b";
  Umask u(0);
  Options o;
  o.access = parse_access("0640");
  Checkpointer ck(dir, o);
  ck.save(make_state(5));
  CHECK(mode_of(root / "shared") == 0750);
  CHECK(mode_of(dir) == 0750);
  CHECK(mode_of(dir / "ckpt-000000000005.h5") == 0640);
  CHECK(mode_of(dir / "latest") == 0640);
}

TEST_CASE("ckpt modes: a directory that exists keeps its mode", "[ckpt][modes]") {
  TempDir root;
  std::filesystem::create_directory(root / "mine");
  ::chmod((root / "mine").c_str(), 0711);
  Checkpointer ck(root / "mine", Options{});
  ck.save(make_state(1));
  CHECK(mode_of(root / "mine") == 0711);
  CHECK(mode_of(root / "mine/ckpt-000000000001.h5") == 0600);
}

TEST_CASE("ckpt modes: only 0600 and 0640 are accepted", "[ckpt][modes]") {
  CHECK(parse_access("") == Access::owner);
  CHECK(parse_access("0600") == Access::owner);
  CHECK(parse_access("0640") == Access::group);
  CHECK(file_mode(Access::owner) == 0600);
  CHECK(directory_mode(Access::group) == 0750);
  for (const char* bad : {"0644", "0666", "0777", "rw", "0660"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_access(bad), Catch::Contains(bad) && Catch::Contains("SAKER_CKPT_MODE"));
  }
}

TEST_CASE("ckpt attack: a temporary file never adopts a planted file or a symbolic link", "[ckpt][modes][attack]") {
  TempDir root;
  Umask u(0);
  commit::create_private(root / "fresh", 0600);
  CHECK(mode_of(root / "fresh") == 0600);
  // Another user's file at the name: refused and left as it was.
  write_file(root / "planted", "theirs", 0666);
  REQUIRE(::chown((root / "planted").c_str(), 65534, 65534) == 0);
  CHECK_THROWS_WITH(commit::create_private(root / "planted", 0600), Catch::Contains((root / "planted").string()));
  CHECK(read_all(root / "planted") == "theirs");
  // A link to a file the attacker wants overwritten or readable: not followed.
  write_file(root / "target", "target", 0600);
  std::filesystem::create_symlink(root / "target", root / "link");
  CHECK_THROWS(commit::create_private(root / "link", 0600));
  CHECK(read_all(root / "target") == "target");
  CHECK(mode_of(root / "target") == 0600);
}
