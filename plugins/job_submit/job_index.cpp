#include "plugins/job_submit/job_index.hpp"

#include <algorithm>
#include <cmath>

namespace saker::job_submit {

namespace {

double micros(JobIndex::Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

JobIndex::JobIndex(JobSource& source, std::function<Clock::time_point()> clock)
    : source_(source), clock_(std::move(clock)) {}

void JobIndex::expect_job() {
  const auto now = clock_();
  const std::lock_guard<std::mutex> lock(mutex_);
  expected_.push_back(now);
}

// Called with mutex_ held.
void JobIndex::add(IndexedJob&& job) {
  const std::uint32_t id = job.id;
  if (job.het_job_id != 0) het_members_[job.het_job_id].push_back(id);
  if (job.array_job_id != 0) array_members_[job.array_job_id].push_back(id);
  jobs_[id] = std::move(job);
}

// Called with mutex_ held.
const IndexedJob* JobIndex::find(const plugins::JobRef& ref) const {
  const auto by_id = [this](std::uint32_t id) -> const IndexedJob* {
    const auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  };
  if (ref.kind == plugins::JobRef::Kind::plain) return by_id(ref.id);
  const auto& groups = ref.kind == plugins::JobRef::Kind::het_component ? het_members_ : array_members_;
  const auto members = groups.find(ref.id);
  if (members == groups.end()) return nullptr;
  const IndexedJob* any = nullptr;
  for (const std::uint32_t id : members->second) {
    const IndexedJob* j = by_id(id);
    if (j == nullptr) continue;
    if (ref.kind == plugins::JobRef::Kind::het_component ? j->het_job_offset == ref.part
                                                          : j->array_task_id == ref.part)
      return j;
    any = j;
  }
  // A task of an array not split off yet lives in the array's meta record; every task
  // of one array shares the submission, hence the datasets.
  return ref.kind == plugins::JobRef::Kind::array_task ? any : nullptr;
}

JobFacts JobIndex::lookup(const plugins::JobRef& ref) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  JobFacts facts;
  const IndexedJob* job = find(ref);
  const bool group_seen = ref.kind == plugins::JobRef::Kind::het_component && het_members_.count(ref.id) > 0;
  if (job == nullptr) {
    if (!loaded_once_) {
      facts.problem = "the plugin has not loaded slurmctld's jobs yet";
    } else if (group_seen) {
      facts.problem = "component " + ref.str() + " is not indexed yet";
    } else if (!expected_.empty() || ref.id > max_id_) {
      facts.problem = "job " + ref.str() + " is not indexed yet";
      if (ref.id > max_id_) wanted_ = true;
    } else {
      facts.state = JobFacts::State::known;  // a job submitted without datasets, before the last sweep
    }
    return facts;
  }
  // Every component of a het job binds the whole job.
  std::vector<const IndexedJob*> members{job};
  if (job->het_job_id != 0)
    if (const auto it = het_members_.find(job->het_job_id); it != het_members_.end()) {
      members.clear();
      for (const std::uint32_t id : it->second) members.push_back(&jobs_.at(id));
    }
  for (const IndexedJob* m : members) {
    if (m->marker.state == plugins::MarkerRead::State::malformed) {
      facts.state = JobFacts::State::malformed;
      facts.problem = "job " + std::to_string(m->id) + ": " + m->marker.problem;
      facts.datasets.clear();
      return facts;
    }
    for (const auto& d : m->marker.datasets)
      if (std::find(facts.datasets.begin(), facts.datasets.end(), d) == facts.datasets.end())
        facts.datasets.push_back(d);
  }
  facts.state = JobFacts::State::known;
  facts.partition = job->partition;
  facts.features = job->features;
  facts.account = job->account;
  facts.nodes = job->nodes;
  return facts;
}

std::size_t JobIndex::expected() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return expected_.size();
}

bool JobIndex::due() const {
  if (wanted_) return true;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_once_ || !expected_.empty()) return true;
  }
  return !last_full_ || clock_() - *last_full_ >= kResyncEvery;
}

// Whether `loads` single-job loads cost more than one full load, as measured here.
bool JobIndex::dearer_than_full(std::size_t loads) const {
  if (full_us_ <= 0) return loads > kGuessSinglesPerFull;  // measured by the next full load
  return single_us_ > 0 && static_cast<double>(loads) * single_us_ > full_us_;
}

void JobIndex::sweep() {
  const auto now = clock_();
  std::size_t expected = 0;
  bool stale = false;
  bool loaded = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    expected = expected_.size();
    stale = !expected_.empty() && now - expected_.front() >= kExpectTimeout;
    loaded = loaded_once_;
  }
  const bool resync = !last_full_ || now - *last_full_ >= kResyncEvery || wanted_.exchange(false);
  // Walking ids costs at least one single load per expected job.
  if (!loaded || stale || resync || dearer_than_full(expected) || !walk()) load_everything();
}

// Single loads of the ids after the highest one seen, until every expected job is found.
// False when it stopped because a full load is cheaper than going on.
bool JobIndex::walk() {
  std::vector<IndexedJob> records;
  std::uint32_t misses = 0;
  for (std::size_t calls = 0;; ++calls) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (expected_.empty()) return true;
      // Ids of jobs without datasets cost loads too: stop once what was spent plus what
      // is still needed at least would exceed one full load.
      if (calls > 0 && dearer_than_full(calls + expected_.size())) return false;
    }
    const std::uint32_t id = max_id_ + 1 + misses;
    records.clear();
    const auto start = clock_();
    const JobSource::Found found = source_.load_one(id, records);
    const auto end = clock_();
    ++single_loads_;
    const double us = micros(end - start);
    single_us_ = single_us_ <= 0 ? us : 0.8 * single_us_ + 0.2 * us;  // smooths out lock waits
    if (found == JobSource::Found::error) return true;  // slurmctld busy or restarting: next sweep
    if (found == JobSource::Found::no) {
      // An id can be skipped (a job refused after its id was taken), or the job is not
      // created yet: give up after a few, the next sweep starts here again.
      if (++misses == 3) return true;
      continue;
    }
    misses = 0;
    std::size_t found_new = 0;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      max_id_ = std::max(max_id_, id);
      for (auto& r : records) {
        if (r.marker.state != plugins::MarkerRead::State::absent && r.id == id && !r.array_task) ++found_new;
        max_id_ = std::max(max_id_, r.id);
        if (jobs_.count(r.id) == 0) add(std::move(r));
      }
      retire(found_new);
    }
  }
}

void JobIndex::load_everything() {
  std::vector<IndexedJob> records;
  const auto start = clock_();
  if (!source_.load_all(records)) return;
  const auto end = clock_();
  ++full_loads_;
  // The first load usually waits for slurmctld to start listening: not a cost sample.
  if (loaded_once_) full_us_ = full_us_ <= 0 ? micros(end - start) : 0.5 * full_us_ + 0.5 * micros(end - start);
  last_full_ = end;
  const std::lock_guard<std::mutex> lock(mutex_);
  std::size_t found_new = 0;
  std::uint32_t max_id = max_id_;
  jobs_.clear();
  het_members_.clear();
  array_members_.clear();
  for (auto& r : records) {
    max_id = std::max(max_id, r.id);
    if (r.marker.state != plugins::MarkerRead::State::absent && r.id > max_id_ && !r.array_task) ++found_new;
    add(std::move(r));
  }
  max_id_ = max_id;
  // The first load also finds the jobs from before slurmctld (re)started: they cannot
  // be told apart from submissions expected since, so it retires nothing.
  retire(loaded_once_ ? found_new : 0);
  loaded_once_ = true;
  // A job expected since well before this load started and still not in it was refused
  // by slurmctld after job_submit accepted it.
  while (!expected_.empty() && start - expected_.front() >= kExpectTimeout) expected_.pop_front();
}

// Called with mutex_ held.
void JobIndex::retire(std::size_t found_new) {
  for (; found_new > 0 && !expected_.empty(); --found_new) expected_.pop_front();
}

}  // namespace saker::job_submit
