#include "launcher/run/recovery.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "launcher/run/heartbeat.hpp"

namespace saker::run {
namespace {

std::string span(double from, double to) {
  if (from <= 0 || to <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", std::max(0.0, to - from));
  return buf;
}

// When the file was created (statx birth time), where the file system keeps it.
std::optional<double> birth_time(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) != 0 || !(sx.stx_mask & STATX_BTIME)) {
    return std::nullopt;
  }
  return static_cast<double>(sx.stx_btime.tv_sec) + sx.stx_btime.tv_nsec * 1e-9;
}

// An mtime this much after the file's birth is a later beat than the first (opening the
// file and setting its time are microseconds apart).
constexpr double kLaterBeat = 0.05;

// The latest of every rank's time, once all `ranks` have one.
double all_ranks(const std::map<int, double>& times, int ranks) {
  if (static_cast<int>(times.size()) < ranks) return 0;
  double latest = 0;
  for (const auto& [rank, t] : times) latest = std::max(latest, t);
  return latest;
}

}  // namespace

std::string breakdown_line(const RecoveryMarks& m) {
  if (m.ranks_up == 0 && m.first_step == 0) return "";
  // Each phase starts where the last phase that was seen ended.
  const double up = m.ranks_up, rv = m.rendezvous, rs = m.restored;
  const double before_restore = rv > 0 ? rv : up;
  const double before_first = rs > 0 ? rs : before_restore;
  const double start = m.failure_seen > 0 ? m.failure_seen : m.verdict;
  std::string line = "recovery breakdown (s): detect " + span(m.failure_seen, m.verdict) + ", decide " +
                     span(m.verdict, m.respawned) + ", respawn " + span(m.respawned, up) + ", rendezvous " +
                     span(up, rv) + ", restore " + span(before_restore, rs) + ", first step " +
                     span(before_first, m.first_step) + "; total " + span(start, m.first_step);
  if (rv == 0 || rs == 0) line += " (phases the ranks did not mark are counted in the next one)";
  return line;
}

bool RecoveryTracker::poll(RecoveryMarks& marks) {
  for (const auto& [rank, mtime] : heartbeat_times(dir_)) {
    const bool first_sight = !up_.count(rank);
    if (first_sight) {
      const auto born = birth_time(dir_ + "/rank-" + std::to_string(rank));
      up_[rank] = born ? *born : mtime;
      seen_[rank] = mtime;
    }
    if (first_.count(rank)) continue;
    if (auto t = phase_time(dir_, rank, "first-step")) {
      first_[rank] = *t;
    } else if (first_sight ? mtime > up_[rank] + kLaterBeat : mtime != seen_[rank]) {
      // A later beat than the first one: seen now, or already at first sight (the file
      // was born well before its mtime).
      first_[rank] = mtime;
    }
  }
  marks.ranks_up = all_ranks(up_, ranks_);
  std::map<int, double> rendezvous, restored;
  for (int r = 0; r < ranks_; ++r) {
    if (auto t = phase_time(dir_, r, "rendezvous")) rendezvous[r] = *t;
    if (auto t = phase_time(dir_, r, "restored")) restored[r] = *t;
  }
  marks.rendezvous = all_ranks(rendezvous, ranks_);
  marks.restored = all_ranks(restored, ranks_);
  marks.first_step = all_ranks(first_, ranks_);
  return marks.first_step > 0;
}

}  // namespace saker::run
