// PolicyGuard: the checkpoint library's residency and encryption rules driven by a real
// site policy (two zones, a storage system mounted in each, a resident restricted dataset
// whose classification requires encrypted checkpoints), through Checkpointer saves.
#include <catch2/catch.hpp>
#include <sys/inotify.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "ckpt/policy_guard.hpp"
#include "ckpt_test_util.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

namespace {

// The mounts live under `root` so the paths exist (the engine resolves symlinks).
std::string site_yaml(const std::filesystem::path& root, const std::string& residency_mode = "enforce") {
  return R"(version: 1
unknown_datasets: deny
rules: {residency: )" + residency_mode + R"(, access: enforce, gpu: enforce, locality: enforce}
classifications:
  - {name: public}
  - {name: internal}
  - {name: restricted, requires_grant: true, encrypt_checkpoints: true}
zones:
  - {name: ae, country: AE}
  - {name: eu, country: DE}
partitions:
  - {name: gpu-ae, zone: ae, nodes: "saker[1-2]", default: true}
  - {name: gpu-eu, zone: eu, nodes: saker3}
storage:
  - {name: lustre-ae, zone: ae, mounts: [)" + (root / "lustre-ae").string() + R"(]}
  - {name: lustre-eu, zone: eu, mounts: [)" + (root / "lustre-eu").string() + R"(]}
datasets:
  - {name: patients, versions: [v1, v3], classification: restricted, countries: [AE], replicas: [lustre-ae]}
  - {name: telemetry, classification: internal, zones: [eu]}
  - {name: imagenet, classification: public}
)";
}

std::filesystem::path make_key(const TempDir& dir) {
  auto bytes = random_bytes(32, 11);
  write_file(dir / "key", std::string(reinterpret_cast<const char*>(bytes.data()), 32), 0600);
  return dir / "key";
}

struct Site {
  TempDir root;
  std::shared_ptr<const PolicyGuard> guard;
  explicit Site(const std::string& mode = "enforce") {
    std::filesystem::create_directories(root / "lustre-ae");
    std::filesystem::create_directories(root / "lustre-eu");
    guard = std::make_shared<const PolicyGuard>(
        saker::policy::Policy::load_string(site_yaml(root.path(), mode), "site.yaml"));
  }
  Options options(bool with_key) const {
    Options o;
    o.guard = guard;
    if (with_key) o.key_file = make_key(root);
    return o;
  }
};

State resident_state(std::uint64_t step) {
  State st = make_state(step, 64);
  st.lineage = {{"patients", "v3"}};
  return st;
}

}  // namespace

TEST_CASE("policy guard: a save into an allowed zone is committed", "[ckpt][policy]") {
  Site site;
  const auto dir = site.root / "lustre-ae/run1/ckpt";
  Checkpointer ck(dir, site.options(true));
  const SaveReport r = ck.save(resident_state(5));
  CHECK(r.committed);
  REQUIRE(list_checkpoints(dir).size() == 1);
  const auto loaded = ck.load_latest();
  REQUIRE(loaded);
  CHECK(loaded->state.lineage == resident_state(5).lineage);
}

TEST_CASE("policy guard: storage outside the allowed zones is refused with the whole story", "[ckpt][policy]") {
  Site site;
  const auto dir = site.root / "lustre-eu/run1";
  Checkpointer ck(dir, site.options(true));
  const State st = resident_state(7);
  try {
    ck.save(st);
    FAIL("the save into the EU zone was not refused");
  } catch (const DestinationRefused& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("refusing to save step 7"));
    CHECK_THAT(m, Catch::Contains(dir.string()));                   // the directory
    CHECK_THAT(m, Catch::Contains("storage lustre-eu in zone eu (DE)"));  // its storage and zone
    CHECK_THAT(m, Catch::Contains("dataset patients@v3"));          // the dataset
    CHECK_THAT(m, Catch::Contains("may only be kept in ae (AE)"));  // its allowed zones
    CHECK_THAT(m, Catch::Contains("write it under " + (site.root / "lustre-ae").string()));  // the fix
    CHECK_THAT(m, Catch::Contains("site policy site.yaml"));
  }
  CHECK_THROWS_AS(ck.save_async(st), DestinationRefused);
  CHECK(list_checkpoints(dir).empty());
  // The same directory takes a model trained on public data only.
  State pub = make_state(8, 64);
  pub.lineage = {{"imagenet", ""}};
  CHECK(ck.save(pub).committed);
}

TEST_CASE("policy guard: symlinks are judged by where they lead", "[ckpt][policy]") {
  Site site;
  std::filesystem::create_directories(site.root / "lustre-eu/real");
  std::filesystem::create_directory_symlink(site.root / "lustre-eu/real", site.root / "lustre-ae/link");
  CHECK_THROWS_WITH(check_destination(*site.guard, site.root / "lustre-ae/link/ckpt", resident_state(1).lineage, true, 1),
                    Catch::Contains("storage lustre-eu"));
}

TEST_CASE("policy guard: a path on no known storage follows the policy engine", "[ckpt][policy]") {
  Site site;
  const auto elsewhere = site.root / "scratch/ckpt";
  SECTION("restricted data: refused (the engine fails closed for resident or granted data)") {
    CHECK_THROWS_WITH(check_destination(*site.guard, elsewhere, resident_state(1).lineage, true, 1),
                      Catch::Contains("is on no storage system") && Catch::Contains("patients@v3"));
  }
  SECTION("public data: allowed, no key needed") {
    Checkpointer ck(elsewhere, site.options(false));
    State pub = make_state(2, 64);
    pub.lineage = {{"imagenet", ""}};
    CHECK(ck.save(pub).committed);
  }
  SECTION("unknown datasets under unknown_datasets: deny are refused") {
    CHECK_THROWS_WITH(check_destination(*site.guard, site.root / "lustre-ae/x", {{"genomes", ""}}, true, 1),
                      Catch::Contains("genomes"));
  }
}

TEST_CASE("policy guard: encryption required by the classification", "[ckpt][policy]") {
  Site site;
  const auto dir = site.root / "lustre-ae/run2";
  SECTION("without a key: refused with a clear message, nothing written") {
    Checkpointer ck(dir, site.options(false));
    CHECK_THROWS_WITH(ck.save(resident_state(3)), Catch::Contains("refusing to save step 3 unencrypted to " + dir.string()) &&
                                                      Catch::Contains("requires encryption for a model trained on patients@v3") &&
                                                      Catch::Contains("key file"));
    CHECK(list_checkpoints(dir).empty());
  }
  SECTION("with the key: committed and encrypted") {
    Checkpointer ck(dir, site.options(true));
    REQUIRE(ck.save(resident_state(3)).committed);
    CHECK(describe(list_checkpoints(dir).back()).encryption == "aes-256-gcm");
  }
  SECTION("resident but unclassified data needs no key in its zone") {
    State st = make_state(4, 64);
    st.lineage = {{"telemetry", ""}};
    Checkpointer ck(site.root / "lustre-eu/t", site.options(false));
    CHECK(ck.save(st).committed);
    CHECK_THROWS_AS(check_destination(*site.guard, dir, st.lineage, false, 4), DestinationRefused);
  }
}

TEST_CASE("policy guard: audit-mode residency warns and allows", "[ckpt][policy]") {
  Site site("audit");
  CHECK_NOTHROW(check_destination(*site.guard, site.root / "lustre-eu/run", resident_state(1).lineage, true, 1));
}

TEST_CASE("policy guard: restricted lineages are those the policy protects, unknown ones too", "[ckpt][policy][modes]") {
  Site site;
  CHECK(site.guard->restricted({{"patients", "v3"}}));
  CHECK(site.guard->restricted({{"imagenet", ""}, {"patients", "v1"}}));
  CHECK(site.guard->restricted({{"nobody-knows", ""}}));  // fail closed
  CHECK_FALSE(site.guard->restricted({{"imagenet", ""}}));
}

TEST_CASE("verify's warning: a restricted checkpoint others may read is named with its mode and the fix",
          "[ckpt][policy][modes]") {
  Site site;
  const auto dir = site.root / "lustre-ae/w";
  {
    Checkpointer ck(dir, site.options(true));
    State st = make_state(30);  // lineage imagenet@2012,patients@v3
    st.world_size = 1;
    ck.save(st);
  }
  const auto file = dir / "ckpt-000000000030.h5";
  CHECK(exposure_warnings(*site.guard, file).empty());  // written 0600
  ::chmod(file.c_str(), 0644);
  auto lines = exposure_warnings(*site.guard, file);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains(file.string() + ": mode 0644") && Catch::Contains("every user") &&
                           Catch::Contains("patients@v3") && Catch::Contains("chmod 600 " + file.string()));
  ::chmod(file.c_str(), 0640);
  lines = exposure_warnings(*site.guard, file);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("mode 0640") && Catch::Contains("its group"));
  // Public data only: no warning, whatever the mode.
  const auto pub = site.root / "lustre-ae/p";
  {
    Checkpointer ck(pub, site.options(false));
    State st = make_state(31);
    st.lineage = {{"imagenet", "2012"}};
    ck.save(st);
  }
  ::chmod((pub / "ckpt-000000000031.h5").c_str(), 0644);
  CHECK(exposure_warnings(*site.guard, pub / "ckpt-000000000031.h5").empty());
}

// Issue 30 §5, the residency race: an attacker flips the checkpoint directory's symlink
// between an allowed zone (lustre-ae) and a forbidden one (lustre-eu) as fast as it can
// while saves run. A save may be refused or fail, but no file (not even a temporary) may
// ever be created under lustre-eu: inotify counts every creation there. The old code
// judged the path and then wrote through it again, and lost this race.
TEST_CASE("policy guard: a symlink flipped to another zone during saves never gets a file written there",
          "[ckpt][policy][race]") {
  Site site;
  const std::filesystem::path ae = site.root / "lustre-ae/ckpt", eu = site.root / "lustre-eu/ckpt";
  std::filesystem::create_directories(ae);
  std::filesystem::create_directories(eu);
  const std::filesystem::path link = site.root / "lustre-ae/link";  // the directory the user names
  REQUIRE(::symlink(ae.c_str(), link.c_str()) == 0);
  Options o = site.options(true);
  o.keep_last = 1;
  Checkpointer ck(link, o);

  const int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(in >= 0);
  REQUIRE(::inotify_add_watch(in, eu.c_str(), IN_CREATE | IN_MOVED_TO) >= 0);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> flips{0};
  std::thread attacker([&] {
    const std::filesystem::path tmp = site.root / "lustre-ae/.flip";
    while (!stop.load(std::memory_order_relaxed)) {
      for (const auto* target : {&eu, &ae}) {
        ::unlink(tmp.c_str());
        if (::symlink(target->c_str(), tmp.c_str()) == 0 && ::rename(tmp.c_str(), link.c_str()) == 0) ++flips;
      }
    }
  });
  constexpr int kAttacks = 400;
  int saved = 0, refused = 0, failed = 0;
  std::string last_refusal, last_failure;
  for (int i = 1; i <= kAttacks; ++i) {
    State st = resident_state(static_cast<std::uint64_t>(i));
    // Each save starts only after the attacker flipped the link again (an event, not a
    // time window), so attacker and saves interleave however the machine schedules them.
    for (const std::uint64_t f = flips.load(); flips.load() == f;) std::this_thread::yield();
    try {
      ck.save(st);
      ++saved;
    } catch (const DestinationRefused& e) {
      ++refused;
      last_refusal = e.what();
    } catch (const std::exception& e) {
      ++failed;
      last_failure = e.what();
    }
  }
  stop = true;
  attacker.join();
  int bypasses = 0;
  alignas(inotify_event) char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      ++bypasses;
      UNSCOPED_INFO("written under lustre-eu: " << (ev->len ? ev->name : "?"));
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  ::close(in);
  INFO(kAttacks << " saves under attack (" << flips.load() << " flips): " << saved << " committed, " << refused
                << " refused, " << failed << " failed; " << bypasses << " files created under lustre-eu");
  WARN(kAttacks << " saves under attack (" << flips.load() << " flips): " << saved << " committed, " << refused
                << " refused, " << failed << " failed; " << bypasses << " files created under lustre-eu\n"
                << "last refusal: " << last_refusal << "\nlast failure: " << last_failure);
  CHECK(bypasses == 0);
  CHECK(std::filesystem::is_empty(eu));
  // A refusal names the directory given and where it led when judged.
  if (refused > 0) CHECK(last_refusal.find(link.string() + " (which leads to " + eu.string() + ")") != std::string::npos);
  CHECK(saved + refused + failed == kAttacks);
}
