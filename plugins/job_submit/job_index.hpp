// The datasets of slurmctld's jobs, for job_modify.
//
// Why an index: in 22.05 job_modify gets the job as an opaque job_record_t, so the
// datasets a job declared cannot be read from it. job_submit keeps them in the job's
// admin_comment (plugins/common/dataset_marker.hpp), but job_submit runs before
// slurmctld gives the job an id. So the index learns ids afterwards, from slurmctld itself (a JobSource: RPCs made
// by the plugin's own thread, which holds none of slurmctld's locks).
//
// Cost: an RPC is several munge round trips and a thread in slurmctld, about as much
// work as the submission itself. So the index is not updated per submission but in
// sweeps (the service runs one at most every few hundred ms while submissions keep
// coming, at once after a quiet period), and each sweep picks the cheaper of:
//   - single-job loads of the new ids (job ids are handed out in sequence), or
//   - one load of every job,
// by the wall time that both actually took on this cluster (a full load grows with the
// number of jobs, a single load does not).
//
// Fail closed: every accepted submission with datasets is "expected" until a job
// carrying its marker is found; while any is expected, lookup() of an id the index has
// not seen says "not known yet" (job_modify then refuses the update and says to retry).
// An id above every id seen so far is "not known yet" too (a task split off an array
// gets a new id: it must not read as "a job without datasets"), and a marker that does
// not parse is "malformed", never "no datasets".
//
// Het jobs: the answer for any component (or the leader) is the union of every
// component's datasets, because the batch script and --het-group steps of one component
// run on the nodes of the others.
// Expectations are retired by count, one per newly found marked job, never all at once:
// a full load can race with a submission slurmctld has not created yet.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "plugins/common/dataset_marker.hpp"
#include "plugins/common/job_ref.hpp"
#include "saker/policy.hpp"

namespace saker::job_submit {

// One job record as the index needs it.
struct IndexedJob {
  std::uint32_t id = 0;
  // A task of a job array split off into a record of its own: it has a new id but is no
  // new submission (it inherits the array's admin_comment), so it retires no expectation.
  bool array_task = false;
  plugins::MarkerRead marker;   // what its admin_comment says
  std::uint32_t array_job_id = 0;  // 0: not part of an array
  std::uint32_t array_task_id = 0;
  std::uint32_t het_job_id = 0;    // 0: not part of a het job
  std::uint32_t het_job_offset = 0;
  std::string partition;
  std::string features;
  std::string account;
  std::string nodes;  // hostlist; "" while pending
};

// What the index can say about one job.
struct JobFacts {
  enum class State { unknown, malformed, known };
  State state = State::unknown;
  std::vector<policy::DatasetRef> datasets;  // known: what it (or its het job) declared
  std::string partition;                     // known: its partition at the last sweep
  std::string features;                      // known: its constraint expression then
  std::string account;                       // known: its account then
  std::string nodes;                         // known: its nodes then ("" while pending)
  std::string problem;                       // unknown / malformed: why, for the user and the log
};

class JobSource {
 public:
  enum class Found { yes, no, error };
  virtual ~JobSource() = default;
  // The records of one job id (several for a job array); `no` when slurmctld does not
  // know the id, `error` on a transport failure (try again later).
  virtual Found load_one(std::uint32_t id, std::vector<IndexedJob>& out) = 0;
  // Every job; false on a transport failure.
  virtual bool load_all(std::vector<IndexedJob>& out) = 0;
};

class JobIndex {
 public:
  using Clock = std::chrono::steady_clock;
  // An expected job not found within this time was refused by slurmctld after
  // job_submit accepted it (bad account, limits): it is forgotten.
  static constexpr std::chrono::seconds kExpectTimeout{10};
  // A full load at least this often drops jobs slurmctld has purged.
  static constexpr std::chrono::minutes kResyncEvery{10};
  // Until a full load is measured: what one costs in single loads on a small cluster.
  static constexpr std::size_t kGuessSinglesPerFull = 4;

  explicit JobIndex(JobSource& source, std::function<Clock::time_point()> clock = Clock::now);

  // Callback side (under slurmctld's locks): no I/O, one short mutex.
  void expect_job();
  // The datasets of a job in any id form. `unknown` while that cannot be known yet: the
  // first load has not happened, the id is above every id seen, or the id is not indexed
  // while accepted submissions still are not.
  JobFacts lookup(const plugins::JobRef& ref) const;

  // Background side (one thread).
  bool due() const;  // a sweep has something to do (a lookup waiting for an id counts)
  void sweep();

  // For tests and logs.
  std::size_t expected() const;
  std::uint64_t full_loads() const { return full_loads_; }
  std::uint64_t single_loads() const { return single_loads_; }

 private:
  void load_everything();
  bool walk();
  void retire(std::size_t found_new);
  void add(IndexedJob&& job);  // with mutex_ held
  const IndexedJob* find(const plugins::JobRef& ref) const;  // with mutex_ held
  bool dearer_than_full(std::size_t loads) const;

  JobSource& source_;
  std::function<Clock::time_point()> clock_;

  mutable std::mutex mutex_;  // guards what callbacks read: the map and the expectations
  std::unordered_map<std::uint32_t, IndexedJob> jobs_;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> het_members_;    // leader -> ids
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> array_members_;  // array -> ids
  std::deque<Clock::time_point> expected_;
  bool loaded_once_ = false;
  std::uint32_t max_id_ = 0;  // the highest id seen (written by the sweeper, under mutex_)
  // A lookup asked for an id above every id seen (a job submitted without datasets, or a
  // split-off array task): the next sweep loads everything, so the answer comes soon.
  mutable std::atomic<bool> wanted_{false};

  std::optional<Clock::time_point> last_full_;
  double full_us_ = 0;    // moving average of full loads; 0 = not measured yet
  double single_us_ = 0;  // moving average of single loads; 0 = not measured yet
  std::uint64_t full_loads_ = 0, single_loads_ = 0;
};

}  // namespace saker::job_submit
