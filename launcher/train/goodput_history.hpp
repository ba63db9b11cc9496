// This job's own failure history, the M (mean time between interruptions) of
// `saker-train --ckpt-every auto` when --mtbf is not given. Rank 0 keeps it in a small
// text file in the checkpoint directory (0600, replaced atomically): one line per
// attempt with its start, the last time it was seen alive (each checkpoint) and how it
// ended. An attempt still marked "running" when the next one starts crashed or was
// killed; one that ended "stopped" was preempted (SIGTERM/SIGUSR1/SIGINT or a resize
// notice, after its checkpoint): both count as interruptions, since either way the job
// restarted.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace saker::train {

// M and where it came from, for the line that prints the chosen interval.
struct MtbfEstimate {
  double seconds = 0;
  std::string source;
};

class FailureHistory {
 public:
  // Before the first interruption there is nothing to measure: M is this prior, one
  // interruption an hour, or the time run so far if longer (so it fades within the job's
  // first hours). Pessimistic for most jobs on purpose: checkpointing more often than
  // needed costs δ/τ (0.3% for δ = 0.05 s), while too long an M risks losing a whole
  // τ of work at the first interruption.
  static constexpr double kPriorMtbfSeconds = 3600;
  // Older attempts fold into one "carried" line, so the file stays small.
  static constexpr std::size_t kMaxAttempts = 1000;
  static constexpr const char* kFileName = "goodput-history";

  enum class End { running, done, stopped };
  struct Attempt {
    double start = 0;
    double alive = 0;  // the last time it was seen running (a checkpoint, or its end)
    End end = End::running;
  };

  explicit FailureHistory(std::string path) : path_(std::move(path)) {}

  // Reads the file. A missing file is a fresh history; one that is not this user's
  // regular file, or does not parse, is ignored (history starts afresh) and the
  // returned warning says why; "" otherwise.
  std::string load();
  // The file's text and back; parse throws saker::Error naming the bad line.
  void parse(const std::string& text);
  std::string text() const;

  // A new attempt starts at `now`. `restarted`: the environment says this start is a
  // restart (SAKER_RUN_ATTEMPT > 1, TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT
  // > 0); when the file shows no interrupted attempt before it, the previous attempt
  // died before it could write its line, and that counts as one interruption too.
  void begin(double now, bool restarted);
  void alive(double now);
  void end(double now, bool stopped);
  // Atomically (temporary file, fsync, rename), mode 0600; throws saker::Error naming
  // the file, the reason and the fix.
  void write() const;

  // Interruptions before the current attempt, and the seconds the job ran (the
  // current attempt up to `now`).
  int interruptions() const;
  double running_seconds(double now) const;
  // M = running time / interruptions; with none yet, max(prior, running time).
  MtbfEstimate estimate(double now) const;
  // "attempt 4; 3 interruption(s) in 900 s of running (2 crashed or killed, 1 stopped by a signal)"
  std::string summary(double now) const;

  const std::string& path() const { return path_; }
  const std::vector<Attempt>& attempts() const { return attempts_; }

 private:
  std::string path_;
  std::vector<Attempt> attempts_;  // the last one is the current attempt once begun
  bool begun_ = false;
  long carried_interruptions_ = 0;  // attempts folded away by kMaxAttempts
  double carried_seconds_ = 0;
  long carried_attempts_ = 0;
};

// Whether the environment says this process is a restart (the three counters above).
// The arguments are the variables' values, nullptr when unset.
bool restarted_from_env(const char* saker_run_attempt, const char* torchelastic_restart_count,
                        const char* slurm_restart_count);

}  // namespace saker::train
