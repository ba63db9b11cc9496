// Where saker-run keeps an attempt's runtime files, so that no other user can plant,
// replace or read them.
//
// Each attempt gets a fresh directory BASE/.saker-run-JOB-PID-ATTEMPT-RANDOM, mode 0700
// (BASE: --ckpt-dir, which every node sees, else TMPDIR or /tmp). It holds the ranks'
// heartbeats (SAKER_HEARTBEAT_DIR) and the preempt marker (SAKER_PREEMPT_MARKER), and is
// removed when the attempt ends. Its name cannot be guessed, mkdir fails on anything that
// exists already, and a marker counts only if it is a regular file of this user inside
// the directory while it is still this user's: another user can neither pre-create the
// marker (and make saker-run believe an emergency checkpoint was committed) nor hand
// saker-run a directory of theirs. Anything found that is not private is refused with
// an error naming the path, its owner and mode, and the fix; nothing is ever adopted.
#pragma once

#include <string>

namespace saker::run {

// Refuses `dir` as the parent of a run directory (saker::Error naming owner, mode, fix)
// unless it is a directory owned by this user or root, and, if group- or other-writable,
// sticky (as /tmp is): otherwise another user could rename what saker-run made there.
void check_parent_dir(const std::string& dir);

// Creates `path` with mode 0700 and checks (lstat) that what is there is a directory of
// this user's with no access for group or others. Refuses anything that exists already.
void make_private_dir(const std::string& path);

// Creates `path` if it does not exist, its missing parents as mkdir -p does and `path`
// itself with mode 0700 (whatever the umask: a group-writable umask would otherwise give
// a directory check_parent_dir refuses). An existing `path` is left as it is.
void create_dir_private(const std::string& path);

// Throws saker::Error unless `path` (not followed if a symlink) is a directory owned by
// this user with no group or other access.
void check_private_dir(const std::string& path);

// Whether `path` (not followed) is a regular file owned by this user. A symlink or a
// file of another user counts as absent.
bool is_own_regular_file(const std::string& path);

class RunDir {
 public:
  // Checks `base` (check_parent_dir) and creates a fresh private directory in it.
  RunDir(const std::string& base, const std::string& job, int attempt);
  ~RunDir();  // removes the directory and what the ranks left in it
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // The ranks' heartbeat files (rank-N) live in the directory itself.
  const std::string& heartbeat_dir() const { return path_; }
  std::string preempt_marker() const { return path_ + "/preempted"; }
  // Whether rank 0 reported an emergency checkpoint: the marker is a regular file of this
  // user and the directory is still this user's private one. Anything else is logged and
  // counts as no marker (fail closed: the attempt is then judged by its exit codes).
  bool preempt_marker_set() const;
  // SAKER_RUN_CKPT_NOTE: where a program that keeps its own checkpoints names their directory.
  std::string checkpoint_note() const { return path_ + "/checkpoints"; }
  // The directory the note names (its first line), when the note is a regular file of this
  // user in this private directory; "" otherwise (nothing written, or not to be trusted).
  std::string checkpoint_note_dir() const;
  // SAKER_RESIZE_NOTICE: where saker-run asks the ranks to stop at their next checkpoint
  // boundary because the job grows (saker-run(1), ELASTIC RUNS).
  std::string resize_notice() const { return path_ + "/resize"; }
  // Writes the new world size there (one line), atomically and mode 0600: the ranks read
  // either nothing or the whole number. Throws saker::Error naming the path on failure.
  void write_resize_notice(int world_size) const;

 private:
  std::string path_;
};

}  // namespace saker::run
