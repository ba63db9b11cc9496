// The recovery breakdown saker-run prints after each recovery (issue 32 §5): how many
// seconds went to detecting the failure, deciding what to do, respawning the ranks, their
// rendezvous, restoring the checkpoint and the first step.
//
// saker-run knows the first two and when it started the next attempt. The rest come from
// the ranks, through their heartbeat directory (heartbeat.hpp): a rank is up when its
// heartbeat file appears (saker-train beats once at start), has taken its first step when
// the file changes again, and may mark rendezvous and restore itself (rank-N.rendezvous,
// rank-N.restored, rank-N.first-step; HeartbeatWriter::phase). A phase no rank reported is
// "n/a" and its time is counted in the next phase that was seen.
#pragma once

#include <map>
#include <string>

namespace saker::run {

// Wall-clock moments (seconds since the epoch) of one recovery; 0 = not seen.
struct RecoveryMarks {
  double failure_seen = 0;  // the first sign of the failure (srun's task-failure line, or the attempt's end)
  double verdict = 0;       // its cause known (the probe that found a lost node, or the attempt reaped)
  double respawned = 0;     // the next attempt started
  double ranks_up = 0;      // every rank's heartbeat appeared
  double rendezvous = 0;    // every rank marked rendezvous
  double restored = 0;      // every rank marked its checkpoint restored
  double first_step = 0;    // every rank finished its first step
};

// "recovery breakdown (s): detect 1.0, decide 0.3, respawn 0.5, rendezvous 0.8, restore 0.1,
// first step 0.2; total 2.9" (n/a for what was not seen). Empty when the next attempt's
// ranks showed nothing (no heartbeats: hang detection off, or a program that does not beat).
std::string breakdown_line(const RecoveryMarks& marks);

// Follows one attempt's heartbeat directory until every rank has taken its first step.
class RecoveryTracker {
 public:
  RecoveryTracker(std::string dir, int ranks) : dir_(std::move(dir)), ranks_(ranks) {}
  // Reads the directory; true once the first step of every rank has been seen.
  bool poll(RecoveryMarks& marks);

 private:
  std::string dir_;
  int ranks_;
  std::map<int, double> up_;     // rank -> its first heartbeat
  std::map<int, double> first_;  // rank -> its first step
  std::map<int, double> seen_;   // rank -> the heartbeat's mtime when first seen
};

}  // namespace saker::run
