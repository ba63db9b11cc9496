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
