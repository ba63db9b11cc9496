// OpenLineage RunEvents (provenance/openlineage.hpp): the JSON, the run id, the event
// files in a directory others may share, and the listing of the checkpoints a step wrote
// (provenance/openlineage_outputs.hpp). The attack cases play another user of the node.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <csignal>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>

#include "ckpt_test_util.hpp"
#include "common/error.hpp"
#include "common/file.hpp"
#include "config.h"
#include "plugins/spank/node_record.hpp"
#include "provenance/openlineage.hpp"
#include "provenance/openlineage_outputs.hpp"
#include "provenance_test_util.hpp"

namespace ol = saker::provenance::openlineage;
using saker::ckpt::testing::TempDir;
using saker::provenance::testing::sample_attestation;

namespace {

ol::StepEvent sample_event(ol::EventType type) {
  ol::StepEvent e;
  e.type = type;
  e.time_ms = 1700000000042;
  e.job_namespace = "slurm://ae1";
  e.job_name = "train";
  e.facts = sample_attestation();
  return e;
}

constexpr std::int64_t kNs = 1000000000;

void touch(const std::filesystem::path& p, std::int64_t mtime, long nsec = 0) {
  std::ofstream(p) << "x";
  const timespec ts[2] = {{static_cast<time_t>(mtime), nsec}, {static_cast<time_t>(mtime), nsec}};
  ::utimensat(AT_FDCWD, p.c_str(), ts, 0);
}

}  // namespace

TEST_CASE("openlineage: a START event holds what OpenLineage requires and the Slurm facet", "[openlineage]") {
  const std::string j = ol::event_json(sample_event(ol::EventType::start));
  const std::string run = ol::run_id("slurm://ae1", sample_attestation());
  const std::string producer = "\"_producer\":\"https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION "/plugins/spank\"";
  CHECK(j.rfind("{\"eventType\":\"START\",\"eventTime\":\"2023-11-14T22:13:20.042Z\",\"run\":{\"runId\":\"" + run +
                    "\",\"facets\":{\"saker_slurm\":{" + producer,
                0) == 0);
  CHECK_THAT(j, Catch::Contains("\"jobId\":\"4242\",\"stepId\":\"0\",\"user\":\"saker-alice\",\"uid\":1001,"
                                "\"account\":\"radiology\",\"partition\":\"ae\",\"zone\":\"AE\",\"nodes\":\"saker[1-2]\","
                                "\"node\":\"saker1\",\"auditLog\":\"/var/spool/saker/saker1/launch-audit.log\","
                                "\"auditHead\":\"7:0123abcd\",\"restartCount\":0}}}"));
  CHECK_THAT(j, Catch::Contains("\"job\":{\"namespace\":\"slurm://ae1\",\"name\":\"saker-alice.train.0\"}"));
  // Inputs: the admitted datasets, with OpenLineage's version facet and Saker's own.
  CHECK_THAT(j, Catch::Contains("\"inputs\":[{\"namespace\":\"saker-dataset\",\"name\":\"patients\","
                                "\"facets\":{\"version\":{"));
  CHECK_THAT(j, Catch::Contains("\"datasetVersion\":\"v3\"}},\"inputFacets\":{\"saker_dataset\":{"));
  CHECK_THAT(j, Catch::Contains("\"ref\":\"patients@v3\",\"enforced\":true,\"policyRevision\":\"f00d\"}}}"));
  CHECK_THAT(j, Catch::Contains("\"ref\":\"imagenet@2012\",\"enforced\":true,\"policyRevision\":\"f00d\",\"digest\":\"ab12\"}"));
  CHECK_THAT(j, Catch::EndsWith("\"outputs\":[],\"producer\":\"https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION
                                "/plugins/spank\",\"schemaURL\":\"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent\"}"));
  CHECK_THAT(j, !Catch::Contains("failedTasks"));  // only end events count tasks
  CHECK_THAT(j, !Catch::Contains("errorMessage"));
}

TEST_CASE("openlineage: end events carry the checkpoints, the task counts and, on FAIL, the error", "[openlineage]") {
  ol::StepEvent e = sample_event(ol::EventType::complete);
  e.outputs = {{"/lustre/ae/run1/ckpt-000000000010.h5", 4096, 1700000001, ""}};
  e.tasks = 2;
  std::string j = ol::event_json(e);
  CHECK_THAT(j, Catch::Contains("\"eventType\":\"COMPLETE\""));
  CHECK_THAT(j, Catch::Contains("\"tasks\":2,\"failedTasks\":0}"));
  CHECK_THAT(j, Catch::Contains("\"outputs\":[{\"namespace\":\"file\",\"name\":\"/lustre/ae/run1/ckpt-000000000010.h5\","
                                "\"outputFacets\":{\"saker_checkpoint\":{"));
  CHECK_THAT(j, Catch::Contains("\"size\":4096,\"modified\":\"2023-11-14T22:13:21Z\"}}}]"));
  CHECK_THAT(j, !Catch::Contains("errorMessage"));
  e.type = ol::EventType::fail;
  e.failed_tasks = 1;
  e.error = "a task on saker1: exit code 3";
  e.outputs_note = "more than 1000 checkpoints: the rest are not listed";
  j = ol::event_json(e);
  CHECK_THAT(j, Catch::Contains("\"eventType\":\"FAIL\""));
  CHECK_THAT(j, Catch::Contains("\"failedTasks\":1,\"outputsNote\":\"more than 1000 checkpoints: the rest are not listed\"}"));
  CHECK_THAT(j, Catch::Contains("\"message\":\"a task on saker1: exit code 3\",\"programmingLanguage\":\"unknown\"}"));
}

TEST_CASE("openlineage: the end event is FAIL when a task failed, and says which", "[openlineage]") {
  ol::StepEvent e = sample_event(ol::EventType::start);
  ol::record_task_exit(e, 0);             // exit 0
  ol::record_task_exit(e, 0);
  ol::finish(e, 1700000005000);
  CHECK(e.type == ol::EventType::complete);
  CHECK(e.tasks == 2);
  CHECK(e.failed_tasks == 0);
  CHECK(e.error.empty());
  CHECK(e.time_ms == 1700000005000);
  ol::StepEvent f = sample_event(ol::EventType::start);
  ol::record_task_exit(f, 3 << 8);        // exit 3
  ol::record_task_exit(f, SIGKILL);       // killed
  ol::record_task_exit(f, 0);
  ol::finish(f, 1700000005000);
  CHECK(f.type == ol::EventType::fail);
  CHECK(f.error == "a task on saker1: exit code 3 (2 of 3 tasks failed)");
  ol::StepEvent k = sample_event(ol::EventType::start);
  ol::record_task_exit(k, SIGTERM);
  ol::finish(k, 0);
  CHECK(k.error == "a task on saker1: killed by signal 15");
  CHECK_THAT(ol::event_json(k), Catch::Contains("\"errorMessage\""));
}

TEST_CASE("openlineage: a requeued job's run is known from the prolog's restart count", "[openlineage][node_record]") {
  const std::map<std::string, std::string> env = {{"SLURM_JOB_UID", "1001"}, {"SLURM_JOB_USER", "saker-alice"},
                                                  {"SLURM_JOB_RESTART_COUNT", "2"}};
  const auto get = [&](const char* k) -> const char* {
    const auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const saker::spank::NodeRecord r = saker::spank::node_record_from_env(9, get);
  CHECK(r.restart_count == 2);
  const std::string text = saker::spank::format_node_record(r);
  CHECK(saker::spank::parse_node_record(text).restart_count == 2);
  // A record the previous release's prolog wrote (14 fields) reads as the first run.
  const auto old = saker::spank::parse_node_record(text.substr(0, text.find("restart_count=")));
  CHECK(old.restart_count == 0);
  CHECK(old.user == "saker-alice");
}

TEST_CASE("openlineage: the run id is a UUID, the same for a step everywhere, another for another step", "[openlineage]") {
  const auto a = sample_attestation();
  const std::string id = ol::run_id("slurm", a);
  REQUIRE(id.size() == 36);
  for (std::size_t i = 0; i < id.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) CHECK(id[i] == '-');
    else CHECK(std::string("0123456789abcdef").find(id[i]) != std::string::npos);
  }
  CHECK(id[14] == '8');                                  // version 8
  CHECK(std::string("89ab").find(id[19]) != std::string::npos);  // RFC 9562 variant
  auto other_node = a;
  other_node.node = "saker2";
  other_node.time_unix += 5;
  CHECK(ol::run_id("slurm", other_node) == id);  // both nodes of a step agree
  auto other_step = a;
  other_step.step_id = "1";
  CHECK(ol::run_id("slurm", other_step) != id);
  CHECK(ol::run_id("slurm2", a) != id);
  auto array_task = a;
  array_task.array_job_id = "4240";
  array_task.array_task_id = "2";
  CHECK(ol::run_id("slurm", array_task) != id);
  // A requeued job runs its steps again: new runs.
  CHECK(ol::run_id("slurm", a, 1) != id);
  CHECK(ol::run_id("slurm", a, 0) == id);
  ol::StepEvent requeued = sample_event(ol::EventType::start);
  requeued.restart_count = 2;
  CHECK_THAT(ol::event_json(requeued), Catch::Contains("\"runId\":\"" + ol::run_id("slurm://ae1", requeued.facts, 2) + "\""));
  CHECK_THAT(ol::event_json(requeued), Catch::Contains("\"restartCount\":2}"));
}

TEST_CASE("openlineage: event times and job names", "[openlineage]") {
  CHECK(ol::event_time(0) == "1970-01-01T00:00:00.000Z");
  CHECK(ol::event_time(1700000000999) == "2023-11-14T22:13:20.999Z");
  ol::StepEvent e = sample_event(ol::EventType::start);
  e.job_name = "a/b\nc";
  CHECK(ol::job_name(e) == "saker-alice.a_b_c.0");
  e.job_name = "";
  CHECK(ol::job_name(e) == "saker-alice.job.0");
  CHECK(ol::event_file_name(e) == "job-4242.0.saker1.START.json");
  e.facts.array_job_id = "4240";
  e.facts.array_task_id = "2";
  e.type = ol::EventType::fail;
  CHECK(ol::event_file_name(e) == "job-4240_2.0.saker1.FAIL.json");
  e.restart_count = 1;
  CHECK(ol::event_file_name(e) == "job-4240_2.0.saker1.r1.FAIL.json");
  e.facts.node = "../etc";
  CHECK_THROWS_AS(ol::event_file_name(e), saker::Error);
  e.facts.node = "saker1";
  e.facts.step_id = "0 1";
  CHECK_THROWS_AS(ol::event_file_name(e), saker::Error);
}

TEST_CASE("openlineage: events are written 0640, group the directory's, and never replace a file", "[openlineage]") {
  TempDir tmp;
  const std::string dir = (tmp / "ol").string();
  REQUIRE(ol::write_event(dir, "job-1.0.n1.START.json", "{}") == "");
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0750);
  const gid_t dir_gid = st.st_gid;
  REQUIRE(::stat((dir + "/job-1.0.n1.START.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(st.st_gid == dir_gid);
  CHECK(saker::file::read(dir + "/job-1.0.n1.START.json") == std::string("{}\n"));
  // The same name again (a job id reused after a controller reset): a second file.
  REQUIRE(ol::write_event(dir, "job-1.0.n1.START.json", "{\"again\":1}") == "");
  CHECK(saker::file::read(dir + "/job-1.0.n1.START.json") == std::string("{}\n"));
  CHECK(saker::file::read(dir + "/job-1.0.n1.START.2.json") == std::string("{\"again\":1}\n"));
  // No temporary is left behind.
  std::size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) files += f.path().filename().string()[0] == '.' ? 100 : 1;
  CHECK(files == 2);
  CHECK(ol::write_event(dir, "../x.json", "{}") != "");
  CHECK(ol::write_event(dir, ".hidden.json", "{}") != "");
}

TEST_CASE("openlineage attack: a planted link is never followed, a shared or linked directory is refused",
          "[openlineage][attack]") {
  TempDir tmp;
  const std::string dir = (tmp / "ol").string();
  REQUIRE(::mkdir(dir.c_str(), 0750) == 0);
  const std::string victim = (tmp / "victim").string();
  std::ofstream(victim) << "precious\n";
  // A link planted under the event's final name: the event goes beside it.
  REQUIRE(::symlink(victim.c_str(), (dir + "/job-2.0.n1.COMPLETE.json").c_str()) == 0);
  REQUIRE(ol::write_event(dir, "job-2.0.n1.COMPLETE.json", "{\"e\":1}") == "");
  CHECK(saker::file::read(victim) == std::string("precious\n"));
  CHECK(saker::file::read(dir + "/job-2.0.n1.COMPLETE.2.json") == std::string("{\"e\":1}\n"));
  // A directory others may write is refused: they could plant or remove events.
  ::chmod(dir.c_str(), 0770);
  CHECK_THAT(ol::write_event(dir, "job-3.0.n1.START.json", "{}"), Catch::Contains("not group- or world-writable"));
  ::chmod(dir.c_str(), 0757);
  CHECK_THAT(ol::write_event(dir, "job-3.0.n1.START.json", "{}"), Catch::Contains("chmod 0750"));
  ::chmod(dir.c_str(), 0750);
  // The directory itself replaced by a link to one elsewhere: refused, nothing written there.
  const std::string elsewhere = (tmp / "elsewhere").string();
  REQUIRE(::mkdir(elsewhere.c_str(), 0750) == 0);
  const std::string linked = (tmp / "linked").string();
  REQUIRE(::symlink(elsewhere.c_str(), linked.c_str()) == 0);
  CHECK_THAT(ol::write_event(linked, "job-3.0.n1.START.json", "{}"), Catch::Contains("a link is refused"));
  CHECK(std::filesystem::is_empty(elsewhere));
}

TEST_CASE("openlineage: the checkpoints a step wrote, and nothing else", "[openlineage]") {
  CHECK(ol::is_checkpoint_name("ckpt-000000000010.h5"));
  CHECK_FALSE(ol::is_checkpoint_name("ckpt-000000000010.shard-00001.h5"));
  CHECK_FALSE(ol::is_checkpoint_name(".ckpt-000000000010.h5.tmp"));
  CHECK_FALSE(ol::is_checkpoint_name("ckpt-00000000001x.h5"));
  TempDir tmp;
  const auto dir = tmp / "run";
  std::filesystem::create_directories(dir / "elastic");
  std::filesystem::create_directories(dir / "deep/er");
  const std::int64_t start = 1700000000;
  touch(dir / "ckpt-000000000010.h5", start + 5);
  touch(dir / "ckpt-000000000020.h5", start);
  touch(dir / "ckpt-000000000005.h5", start - 100);  // an earlier step's
  touch(dir / "ckpt-000000000006.h5", start - 1, 900000000);  // the previous step's, 0.1 s before
  touch(dir / "ckpt-000000000010.shard-00001.h5", start + 5);
  touch(dir / "elastic/ckpt-000000000003.h5", start + 1);
  touch(dir / "deep/er/ckpt-000000000004.h5", start + 1);  // two levels down: not looked at
  REQUIRE(::symlink((dir / "ckpt-000000000010.h5").c_str(), (dir / "ckpt-000000000099.h5").c_str()) == 0);
  REQUIRE(::symlink(dir.c_str(), (dir / "loop").c_str()) == 0);
  const ol::Listing l = ol::list_checkpoints(dir.string() + "/", ::geteuid(), start * kNs);
  CHECK(l.note == "");
  REQUIRE(l.outputs.size() == 3);
  CHECK(l.outputs[0].path == (dir / "ckpt-000000000010.h5").string());
  CHECK(l.outputs[0].size == 1);
  CHECK(l.outputs[0].mtime_unix == start + 5);
  CHECK(l.outputs[1].path == (dir / "ckpt-000000000020.h5").string());
  CHECK(l.outputs[2].path == (dir / "elastic/ckpt-000000000003.h5").string());
  // Files of another owner are not the job's.
  CHECK(ol::list_checkpoints(dir.string(), ::geteuid() + 1, start * kNs).outputs.empty());
  CHECK_THAT(ol::list_checkpoints("relative/dir", ::geteuid(), start * kNs).note, Catch::Contains("not an absolute path"));
  CHECK_THAT(ol::list_checkpoints((tmp / "none").string(), ::geteuid(), start * kNs).note, Catch::Contains("cannot list"));
  // A step that started within a second of another's checkpoint: not its output.
  CHECK(ol::list_checkpoints(dir.string(), ::geteuid(), (start + 5) * kNs + 1).outputs.size() == 0);
  CHECK(ol::list_checkpoints(dir.string(), ::geteuid(), (start + 5) * kNs).outputs.size() == 1);
  // A file written after step_start_ns() is never dated before it (the same coarse clock).
  const std::int64_t now = ol::step_start_ns();
  std::filesystem::create_directories(tmp / "fresh");
  std::ofstream(tmp / "fresh/ckpt-000000000001.h5") << "x";
  CHECK(ol::list_checkpoints((tmp / "fresh").string(), ::geteuid(), now).outputs.size() == 1);

  // Through a child process (as the caller's own uid here), and its report read back.
  const ol::Listing child = ol::list_checkpoints_as(dir.string(), ::geteuid(), ::getegid(), start * kNs, 10000);
  CHECK(child.note == "");
  CHECK(child.outputs == l.outputs);
}

TEST_CASE("openlineage attack: the listing sees only what the job's user may see", "[openlineage][attack]") {
  if (::geteuid() != 0) {
    WARN("needs root, as slurmstepd is: not checked");
    return;
  }
  TempDir tmp;  // 0700, root's
  const uid_t nobody = 65534;
  const auto file = tmp / "ckpt-000000000001.h5";
  touch(file, 1700000001);
  REQUIRE(::chown(file.c_str(), nobody, nobody) == 0);
  // Root itself would list it; the child, running as the user, cannot enter the directory.
  CHECK(ol::list_checkpoints(tmp.path().string(), nobody, 1700000000 * kNs).outputs.size() == 1);
  const ol::Listing l = ol::list_checkpoints_as(tmp.path().string(), nobody, nobody, 1700000000 * kNs, 10000);
  CHECK(l.outputs.empty());
  CHECK_THAT(l.note, Catch::Contains("Permission denied"));
}

TEST_CASE("openlineage attack: the child's report cannot name a file outside the directory", "[openlineage][attack]") {
  const ol::Listing l = ol::decode_listing(
      "\n1\t2\tckpt-000000000001.h5\n1\t2\t../ckpt-000000000002.h5\n1\t2\t/etc/ckpt-000000000003.h5\n"
      "1\t2\tsub/ckpt-000000000004.h5\n1\t2\ta/b/ckpt-000000000005.h5\nx\t2\tckpt-000000000006.h5\n1\t2\tpasswd\n",
      "/d");
  REQUIRE(l.outputs.size() == 2);
  CHECK(l.outputs[0].path == "/d/ckpt-000000000001.h5");
  CHECK(l.outputs[1].path == "/d/sub/ckpt-000000000004.h5");
  CHECK_THAT(ol::decode_listing("", "/d").note, Catch::Contains("cut short"));
  CHECK_THAT(ol::decode_listing("\n1\t2\tckpt-000000000001.h5", "/d").note, Catch::Contains("may be missing"));
  // encode and decode agree.
  const ol::Listing round = ol::decode_listing(ol::encode_listing(l, "/d"), "/d");
  CHECK(round.outputs == l.outputs);
}

TEST_CASE("openlineage: a listing that hangs is abandoned at its deadline, and one that fails is named",
          "[openlineage]") {
  // A hung file system stands in as a lister that sleeps far past the deadline.
  const ol::Listing hung = ol::list_in_child("/d", ::geteuid(), ::getegid(), 200, [] {
    ::sleep(30);
    return ol::Listing{};
  });
  CHECK_THAT(hung.note, Catch::Contains("did not finish within 200 ms"));
  CHECK(hung.outputs.empty());
  const ol::Listing failed =
      ol::list_in_child("/d", ::geteuid(), ::getegid(), 10000, []() -> ol::Listing { throw std::runtime_error("x"); });
  CHECK_THAT(failed.note, Catch::Contains("failed: outputs unknown"));
  // Another uid than ours, unprivileged: the child refuses rather than list as us.
  if (::geteuid() != 0) {
    const ol::Listing refused = ol::list_in_child("/d", ::geteuid() + 1, ::getegid(), 10000, [] { return ol::Listing{}; });
    CHECK_THAT(refused.note, Catch::Contains("failed: outputs unknown"));
  }
}
