// The job's allocation as slurmctld holds it, and the two ways saker-run changes it for an
// elastic run (saker-run(1), ELASTIC RUNS):
//   - release: a lost node leaves the job (`scontrol update JobId=J NodeList=SURVIVORS`), so
//     that slurmctld's later DOWN verdict on it neither requeues nor kills the job (without
//     sbatch --no-kill it would do one or the other);
//   - expand: a node that answers again comes back only through Slurm's job expansion
//     (22.05 to 26.05, with SchedulerParameters=permit_job_expansion): an allocation of that
//     node with --dependency=expand:J, merged into J by setting its node count to 0 (what
//     `salloc --no-shell --dependency=expand:J -w NODE` and `scontrol update JobId=H
//     NumNodes=0` do).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace saker::run {

struct JobView {
  std::vector<std::string> nodes;  // the job's nodes now
  std::string partition;
  std::uint32_t time_limit = 0;    // minutes (INFINITE when none)
};

// The job as slurmctld knows it now; nullopt (after a warning naming the reason) when it
// cannot be read.
std::optional<JobView> load_job_view(const std::string& job_id);

// Shrinks the running job to `kept`; logs what happened. False when slurmctld refused.
bool release_nodes(const std::string& job_id, const std::vector<std::string>& kept, const std::string& lost);

// Job expansion onto nodes that answer again, one helper allocation per node at a time.
class Expander {
 public:
  explicit Expander(std::string job_id) : job_id_(std::move(job_id)) {}
  ~Expander();  // cancels helper allocations still pending
  Expander(const Expander&) = delete;
  Expander& operator=(const Expander&) = delete;

  // Moves `node` towards the job: asks for it (dependency expand), and once that allocation
  // runs, merges it. True once merged. Logs each step once; after slurmctld refused
  // expansion itself (permit_job_expansion not set) it only returns false.
  bool bring_back(const std::string& node, const JobView& job, double now);
  bool refused() const { return refused_; }

 private:
  struct Helper {
    std::uint32_t id = 0;
    double since = 0;
  };
  std::string job_id_;
  std::map<std::string, Helper> helpers_;  // node -> its pending helper allocation
  std::map<std::string, double> retry_at_;
  bool refused_ = false;
};

}  // namespace saker::run
