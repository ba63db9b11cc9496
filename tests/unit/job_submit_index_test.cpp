// job_submit_saker.so's index of jobs' datasets (job_index.hpp): fail-closed lookups,
// expectations retired by count, and the choice between single and full loads.
#include <catch2/catch.hpp>

#include <map>

#include "plugins/job_submit/job_index.hpp"

using namespace saker::job_submit;
using namespace std::chrono_literals;
using saker::policy::DatasetRef;

namespace {

IndexedJob job(std::uint32_t id, const char* admin_comment, bool array_task = false) {
  IndexedJob j;
  j.id = id;
  j.array_task = array_task;
  j.marker = saker::plugins::read_marker(admin_comment);
  return j;
}

// slurmctld as the index sees it: created jobs, a clock that each load advances by what
// that kind of load costs, and counters.
struct FakeSlurm final : JobSource {
  JobIndex::Clock::time_point now{};
  std::chrono::microseconds single_cost{500}, full_cost{2000};
  std::map<std::uint32_t, std::vector<IndexedJob>> jobs;
  bool down = false;

  Found load_one(std::uint32_t id, std::vector<IndexedJob>& out) override {
    now += single_cost;
    if (down) return Found::error;
    const auto it = jobs.find(id);
    if (it == jobs.end()) return Found::no;
    out = it->second;
    return Found::yes;
  }
  bool load_all(std::vector<IndexedJob>& out) override {
    now += full_cost;
    if (down) return false;
    for (const auto& [id, records] : jobs) out.insert(out.end(), records.begin(), records.end());
    return true;
  }
  void create(std::uint32_t id, bool with_datasets = true) {
    jobs[id] = {job(id, with_datasets ? "saker-datasets=patients@v3" : nullptr)};
  }
};

struct Fixture {
  FakeSlurm slurm;
  JobIndex index{slurm, [this] { return slurm.now; }};
  std::vector<DatasetRef> out;
  bool known(std::uint32_t id) {
    const JobFacts facts = index.lookup({saker::plugins::JobRef::Kind::plain, id, 0});
    out = facts.datasets;
    return facts.state == JobFacts::State::known;
  }
};

}  // namespace

TEST_CASE("the index fails closed until its first load", "[job_submit][index]") {
  Fixture f;
  f.slurm.create(1);
  f.slurm.create(3, false);
  CHECK_FALSE(f.known(1));
  CHECK(f.index.due());
  f.slurm.down = true;  // slurmctld is not listening yet
  f.index.sweep();
  CHECK_FALSE(f.known(1));
  CHECK_FALSE(f.known(2));
  f.slurm.down = false;
  f.index.sweep();
  REQUIRE(f.known(1));
  CHECK(f.out == std::vector<DatasetRef>{{"patients", "v3"}});
  CHECK(f.known(2));  // nothing expected: an id below one seen and not indexed has no datasets
  CHECK(f.out.empty());
  CHECK_FALSE(f.index.due());
}

TEST_CASE("a submission is not known until its job is found", "[job_submit][index]") {
  Fixture f;
  f.slurm.create(1);
  f.index.sweep();
  f.index.expect_job();
  CHECK_FALSE(f.known(2));  // its id is not known yet: job_modify must refuse
  CHECK(f.known(1));        // jobs already indexed still answer
  CHECK(f.index.due());
  f.index.sweep();  // not created yet: three misses, nothing retired
  CHECK(f.index.expected() == 1);
  CHECK_FALSE(f.known(2));
  f.slurm.create(2);
  f.index.sweep();
  CHECK(f.index.expected() == 0);
  REQUIRE(f.known(2));
  CHECK(f.out.size() == 1);
  CHECK_FALSE(f.known(3));  // above every id seen: a split-off array task, say, is not "no datasets"
}

TEST_CASE("the first load retires no expectation", "[job_submit][index]") {
  // Jobs from before a slurmctld restart are in the first load; a submission accepted
  // meanwhile may not be created yet and must stay expected.
  Fixture f;
  f.slurm.create(1);
  f.slurm.create(2);
  f.index.expect_job();
  f.index.sweep();
  CHECK(f.index.expected() == 1);
  CHECK_FALSE(f.known(3));
  f.slurm.create(3);
  f.index.sweep();
  CHECK(f.index.expected() == 0);
  CHECK(f.known(3));
}

TEST_CASE("a full load racing a submission retires only the jobs it found", "[job_submit][index]") {
  Fixture f;
  f.slurm.single_cost = 1000us;  // singles dearer than a full load: sweeps load everything
  f.slurm.full_cost = 100us;
  f.index.sweep();
  for (int i = 0; i < 5; ++i) f.index.expect_job();
  for (std::uint32_t id = 1; id <= 4; ++id) f.slurm.create(id);  // the fifth is still in flight
  f.index.sweep();
  CHECK(f.index.expected() == 1);
  CHECK(f.known(4));
  CHECK_FALSE(f.known(5));
  f.slurm.create(5);
  f.index.sweep();
  CHECK(f.index.expected() == 0);
  CHECK(f.known(5));
}

TEST_CASE("a sweep picks the cheaper kind of load", "[job_submit][index]") {
  Fixture f;
  std::uint32_t next = 1;
  const auto submit = [&](int n, bool with_datasets = true) {
    for (int i = 0; i < n; ++i) {
      if (with_datasets) f.index.expect_job();
      f.slurm.create(next++, with_datasets);
    }
  };
  f.index.sweep();  // at slurmctld's start: not a cost sample
  SECTION("full loads are cheap (few jobs): one per sweep") {
    f.slurm.single_cost = 500us;
    f.slurm.full_cost = 1000us;
    submit(20);
    f.index.sweep();  // no costs known: 20 single loads are guessed dearer
    CHECK(f.index.single_loads() == 0);
    CHECK(f.index.full_loads() == 2);
    submit(20);
    f.index.sweep();  // measures one single load, then sees 19 more would cost more
    CHECK(f.index.single_loads() == 1);
    CHECK(f.index.full_loads() == 3);
    submit(20);
    f.index.sweep();  // straight to a full load now
    CHECK(f.index.single_loads() == 1);
    CHECK(f.index.full_loads() == 4);
    CHECK(f.index.expected() == 0);
    CHECK(f.known(60));
  }
  SECTION("full loads are dear (many jobs): single loads of the new ids") {
    f.slurm.single_cost = 500us;
    f.slurm.full_cost = 100ms;
    submit(20);
    f.index.sweep();
    CHECK(f.index.full_loads() == 2);
    submit(20);
    f.index.sweep();
    CHECK(f.index.single_loads() == 20);
    CHECK(f.index.full_loads() == 2);
    CHECK(f.index.expected() == 0);
    CHECK(f.known(40));
  }
  SECTION("many jobs without datasets between: the walk gives up for a full load") {
    f.slurm.single_cost = 500us;
    f.slurm.full_cost = 5ms;  // ten single loads
    submit(5);
    f.index.sweep();
    CHECK(f.index.full_loads() == 2);
    submit(30, false);
    submit(1);
    f.index.sweep();
    CHECK(f.index.single_loads() < 12);
    CHECK(f.index.full_loads() == 3);
    CHECK(f.index.expected() == 0);
    CHECK(f.known(36));
    CHECK(f.out.size() == 1);
  }
}

TEST_CASE("split array tasks retire no expectation", "[job_submit][index]") {
  Fixture f;
  f.slurm.single_cost = 1000us;
  f.slurm.full_cost = 100us;
  f.index.sweep();
  f.index.expect_job();  // the array
  f.index.expect_job();  // another submission, in flight
  f.slurm.create(1);
  f.slurm.jobs[2] = {job(2, "saker-datasets=patients@v3", true), job(3, "saker-datasets=patients@v3", true)};  // tasks split off array 1
  f.index.sweep();
  CHECK(f.index.expected() == 1);
  CHECK(f.known(3));  // a task's datasets are indexed
  CHECK_FALSE(f.known(9));
}

TEST_CASE("a job refused by slurmctld after job_submit is forgotten after a while", "[job_submit][index]") {
  Fixture f;
  f.index.sweep();
  f.index.expect_job();  // never created
  f.index.sweep();
  CHECK_FALSE(f.known(7));
  f.slurm.now += JobIndex::kExpectTimeout + 1s;
  const auto fulls = f.index.full_loads();
  f.index.sweep();
  CHECK(f.index.full_loads() == fulls + 1);  // forgotten only once a full load confirms it
  CHECK(f.index.expected() == 0);
  CHECK_FALSE(f.known(7));  // above every id seen: not known, whatever the expectations
  f.slurm.create(8, false);
  f.index.sweep();
  f.slurm.now += JobIndex::kResyncEvery;
  f.index.sweep();
  CHECK(f.known(7));  // an id below one seen, not in slurmctld: a job without datasets
}

TEST_CASE("the index resyncs with a full load now and then", "[job_submit][index]") {
  Fixture f;
  f.slurm.create(1);
  f.index.sweep();
  CHECK_FALSE(f.index.due());
  f.slurm.jobs.erase(1);  // purged by slurmctld
  f.slurm.now += JobIndex::kResyncEvery;
  CHECK(f.index.due());
  f.index.sweep();
  CHECK(f.known(1));
  CHECK(f.out.empty());
}

TEST_CASE("het components and array tasks are found by their own id form", "[job_submit][index]") {
  Fixture f;
  IndexedJob leader = job(10, nullptr), member = job(11, "saker-datasets=patients");
  leader.het_job_id = member.het_job_id = 10;
  member.het_job_offset = 1;
  IndexedJob meta = job(20, "saker-datasets=telemetry"), split = job(23, "saker-datasets=telemetry", true);
  meta.array_job_id = split.array_job_id = 20;
  meta.array_task_id = 4;
  split.array_task_id = 3;
  f.slurm.jobs[10] = {leader, member};
  f.slurm.jobs[20] = {meta, split};
  f.index.sweep();
  using saker::plugins::JobRef;
  // Any component binds the whole het job: the leader reads the later component's datasets.
  for (const JobRef& ref : {JobRef{JobRef::Kind::het_component, 10, 0}, JobRef{JobRef::Kind::het_component, 10, 1},
                            JobRef{JobRef::Kind::plain, 10, 0}, JobRef{JobRef::Kind::plain, 11, 0}}) {
    INFO(ref.str());
    const JobFacts facts = f.index.lookup(ref);
    CHECK(facts.state == JobFacts::State::known);
    CHECK(facts.datasets == std::vector<DatasetRef>{{"patients", ""}});
  }
  CHECK(f.index.lookup({JobRef::Kind::het_component, 10, 2}).state == JobFacts::State::unknown);
  for (const JobRef& ref : {JobRef{JobRef::Kind::array_task, 20, 3}, JobRef{JobRef::Kind::array_task, 20, 1},
                            JobRef{JobRef::Kind::plain, 23, 0}}) {
    INFO(ref.str());
    CHECK(f.index.lookup(ref).datasets == std::vector<DatasetRef>{{"telemetry", ""}});
  }
}

TEST_CASE("a malformed marker is never 'no datasets'", "[job_submit][index]") {
  Fixture f;
  f.slurm.jobs[1] = {job(1, "saker-datasets=a,,b")};
  f.index.sweep();
  const JobFacts facts = f.index.lookup({saker::plugins::JobRef::Kind::plain, 1, 0});
  CHECK(facts.state == JobFacts::State::malformed);
  CHECK_FALSE(facts.problem.empty());
}

TEST_CASE("asking for an id above every id seen makes the index load it soon", "[job_submit][index]") {
  Fixture f;
  f.slurm.create(1);
  f.index.sweep();
  CHECK_FALSE(f.index.due());
  f.slurm.create(2, false);  // submitted without datasets: nothing expected
  CHECK_FALSE(f.known(2));   // not seen yet: unknown, and wanted
  CHECK(f.index.due());
  f.index.sweep();
  CHECK(f.known(2));
  CHECK(f.out.empty());
  CHECK_FALSE(f.index.due());
}
