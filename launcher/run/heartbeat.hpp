// saker-run's hang detection: what "progress" means.
//
// saker-run exports SAKER_HEARTBEAT_DIR to every rank. A rank shows progress by touching
// SAKER_HEARTBEAT_DIR/rank-RANK (saker-train does every training step; any program can:
// `touch "$SAKER_HEARTBEAT_DIR/rank-$RANK"`). A rank whose file exists and has not changed
// for --hang-timeout seconds is hung: saker-run stops the attempt and counts it as failed.
// A rank that never touched its file is not watched, so programs that know nothing of the
// heartbeat are never killed by it. The files are plain mtimes: no descriptor to inherit,
// nothing for srun to forward, and they work for every rank on a file system saker-run sees.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace saker::run {

inline constexpr const char* kHeartbeatDirEnv = "SAKER_HEARTBEAT_DIR";

// The rank side: touches the file at most once a second (cheap enough for every step).
class HeartbeatWriter {
 public:
  // Reads SAKER_HEARTBEAT_DIR; without it every beat() is a no-op.
  explicit HeartbeatWriter(int rank);
  void beat();
  // Marks a recovery phase this rank has finished ("rendezvous", "restored", "first-step"):
  // touches SAKER_HEARTBEAT_DIR/rank-RANK.NAME, which saker-run's recovery breakdown reads
  // (saker-run(1), RECOVERY BREAKDOWN). Best effort, a no-op without the directory.
  void phase(const char* name) const;

 private:
  std::string path_;
  std::chrono::steady_clock::time_point last_{};
};

struct StaleRank {
  int rank = -1;
  double silent_s = 0;  // seconds since its last heartbeat
};

// The supervisor side: the rank whose heartbeat in `dir` is oldest, if it is older than
// `limit_s` at wall-clock time `now` (seconds since the epoch). Only regular files owned
// by this user count. saker-run makes `dir` private and fresh for each attempt
// (runtime_dir.hpp).
std::optional<StaleRank> stale_heartbeat(const std::string& dir, double now, double limit_s);

}  // namespace saker::run

namespace saker::run {

// The mtime (seconds since the epoch) of every rank's heartbeat in `dir`, by rank; only
// regular files of this user count, as for stale_heartbeat().
std::map<int, double> heartbeat_times(const std::string& dir);

// When rank `rank` finished phase `name` (the mtime of rank-RANK.NAME), if it said so.
std::optional<double> phase_time(const std::string& dir, int rank, const std::string& name);

// --hang-timeout: fixed (a number of seconds) or derived from the observed step time.
// Derived ("auto", the default): until every watched rank has shown kWarmupBeats
// heartbeat intervals, the start-up allowance (loading data and resuming can be slow);
// then kFactor times the slowest interval seen so far in this run (across attempts; a
// checkpoint save inside a step counts), at least kFloorSeconds.
class HangLimit {
 public:
  static constexpr double kStartupSeconds = 600;
  static constexpr double kFloorSeconds = 60;
  static constexpr double kFactor = 10;
  static constexpr int kWarmupBeats = 3;

  // fixed_s > 0: that limit; 0: hang detection off; < 0: derived.
  explicit HangLimit(double fixed_s) : fixed_s_(fixed_s) {}
  bool enabled() const { return fixed_s_ != 0; }
  // A new attempt: its ranks start over (the slowest interval seen is kept).
  void new_attempt() { last_.clear(); beats_.clear(); }
  // Feeds the heartbeat times of one poll.
  void observe(const std::map<int, double>& times);
  double limit() const;
  // How the limit was chosen, for the hang message ("--hang-timeout 600 s", or "derived: ...").
  std::string basis() const;
  double slowest_interval() const { return slowest_; }

 private:
  double fixed_s_;
  std::map<int, double> last_;
  std::map<int, int> beats_;
  double slowest_ = 0;
};

}  // namespace saker::run
