// The sweep's state directory (DIR in saker-sweep(1)):
//   DIR/sweep.yaml          the sweep file as first submitted (every worker reads this copy)
//   DIR/origin              the folder it came from (relative paths, the jobs' cwd)
//   DIR/file                the sweep file's absolute path: whose state this is (saker-sweep(1))
//   DIR/jobs                one line per submitted job array: "JOBID TIME TRIALS"
//   DIR/lock                flock()ed around every state change
//   DIR/trials/ID/state     the trial's state, key=value lines, replaced atomically
//   DIR/trials/ID/metrics   the metrics file its program appends to
//   DIR/trials/ID/log       its program's output, appended across runs
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace saker::sweep {

// interrupted: a local run (saker-sweep run) was stopped by a signal, or its command stopped
// after an emergency checkpoint with no job to requeue it; running again resumes it.
enum class State { pending, running, stopped, completed, failed, interrupted };
const char* state_name(State state);

struct TrialState {
  std::size_t id = 0;
  State state = State::pending;
  std::size_t rung = 0;    // running: the rung being run; otherwise the last one judged
  std::string owner;       // running: the worker, "ARRAYJOB_TASK" (stable across requeues)
  std::map<std::size_t, std::pair<std::uint64_t, double>> results;  // rung -> (step, metric)
  std::uint32_t runs = 0;  // how many times a worker took it on: start, resume, promotion
  std::string reason;      // stopped/failed/completed: why, in words
  bool finished() const { return state == State::stopped || state == State::completed; }
};

class Store {
 public:
  explicit Store(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path trial_dir(std::size_t id) const { return dir_ / "trials" / std::to_string(id); }
  std::filesystem::path metrics_path(std::size_t id) const { return trial_dir(id) / "metrics"; }
  std::filesystem::path log_path(std::size_t id) const { return trial_dir(id) / "log"; }

  // Holds DIR/lock (flock, exclusive) for its lifetime.
  class Lock {
   public:
    explicit Lock(const std::filesystem::path& file);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_ = -1;
  };
  Lock lock() const { return Lock(dir_ / "lock"); }

  // A trial never saved reads as pending. Throws saker::Error on a damaged state file.
  TrialState load(std::size_t id) const;
  std::vector<TrialState> load_all(std::size_t count) const;
  void save(const TrialState& trial) const;  // write, fsync, rename: never half a state

  // Atomically replaces DIR/NAME with `text` (creating DIR).
  void write_file(const std::string& name, const std::string& text) const;
  std::string read_file(const std::string& name) const;  // "" when missing
  void append_file(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path dir_;
};

// "ARRAYJOB_TASK" -> "ARRAYJOB".
std::string owner_job(const std::string& owner);

}  // namespace saker::sweep
