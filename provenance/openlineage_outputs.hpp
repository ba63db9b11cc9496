// The checkpoints a step wrote, for its OpenLineage end event (openlineage.hpp).
//
// Why they are found at the end, from what exists: libsaker_ckpt tells nobody outside the
// job what it saved, and the plugin must not trust a list the task hands it. So when the
// step ends, spank_saker.so looks in the step's checkpoint directory (SAKER_CKPT_DIR in the
// step's environment at launch, as saker-run and saker-sweep set it) and in its direct
// subdirectories, and reports the checkpoint main files (ckpt-NNNNNNNNNNNN.h5) that are
// regular files of the job's user, modified since the step started. A checkpoint saved
// elsewhere (a --ckpt-dir not in SAKER_CKPT_DIR) is not reported; one the user touched
// during the step is. The list is the step's claim, as the rest of the provenance record
// is: only the datasets are the site's word.
//
// The directory is the user's choice, so the listing runs in a child process with the
// job's uid and gid (it sees only what the user may see: no root-only names leak into the
// site's lineage), and slurmstepd waits for it at most a bounded time: a hung file system
// costs the step's end that long and the event says the outputs are unknown.
//
// The same child then reads each checkpoint's main file for its SHA-256 (hash_outputs),
// the digest saker-ckpt provenance states as the checkpoint's subject. It reads as the
// user, never through a link (each path component opened O_NOFOLLOW below the opened
// directory), and only a regular file of the user's that still has the listed size and
// time before and after. A big checkpoint must not hold up slurmstepd, so the reading is
// bounded three ways: a byte budget (a file that would pass it is not read at all), a
// deadline (sha256sum, reading the opened file, is killed when it passes), and the
// listing is reported before any reading starts, so slurmstepd, which stops waiting at
// its own deadline, keeps the listing even when a read hangs. A checkpoint left without
// its digest is said in the event's note. The digest is the step's claim, like the list.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "provenance/openlineage.hpp"

namespace saker::provenance::openlineage {

inline constexpr std::size_t kMaxOutputs = 1000;

struct Listing {
  std::vector<Output> outputs;  // path order
  std::string note;             // "" when the listing (and the digests asked for) was whole, else why not
};

// How much a step's end may read to hash its checkpoints; {0, 0}: nothing is read.
struct HashLimits {
  std::uint64_t bytes = 0;  // at most this many bytes in all
  int ms = 0;               // and for at most this long from the call
};

// The program that hashes an opened file on its standard input (coreutils, fixed path:
// never looked up in the user's PATH). Run in a fresh process, so nothing of slurmstepd's
// threads or locks is inherited by the reading.
inline constexpr const char* kSha256Program = "/usr/bin/sha256sum";

// "ckpt-" 12 digits ".h5": a checkpoint's main file (its shards are part of it).
bool is_checkpoint_name(std::string_view name);

// In this process: DIR and its direct subdirectories (links are not followed), regular
// files named like checkpoints, owned by `owner`, modified at or after `since_ns` (Unix
// nanoseconds: a checkpoint an earlier step wrote in the same second is not this step's).
Listing list_checkpoints(const std::string& dir, uid_t owner, std::int64_t since_ns);

// Fills the sha256 of `outputs` (absolute paths under `dir`, as listed), newest first,
// within `limits`. Each is opened below `dir` without following a link and read only when
// it is a regular file of `owner` with the listed size and modification time, the same
// before and after the reading. Returns "" or why some have no digest.
std::string hash_outputs(std::vector<Output>& outputs, const std::string& dir, uid_t owner, const HashLimits& limits,
                         const char* program = kSha256Program);

// The same in a child running as uid/gid (the caller must be root, or be uid already),
// waited for at most `timeout_ms`; past it the child is abandoned and the note says so.
// With `hash` the child hashes the outputs too (its deadline is hash.ms from this call:
// keep it below timeout_ms, so the digests arrive in time).
Listing list_checkpoints_as(const std::string& dir, uid_t uid, gid_t gid, std::int64_t since_ns, int timeout_ms,
                            const HashLimits& hash = {});

// Now, in Unix nanoseconds, from the clock file systems stamp modification times with
// (CLOCK_REALTIME_COARSE): a file written after this call never has an earlier mtime.
std::int64_t step_start_ns();

// The mechanics of the above, exposed for tests: runs `list` in the child as uid/gid,
// reports the listing, then runs `hash` (when given) on it and reports the digests.
using HashStep = std::function<std::string(Listing&)>;  // fills sha256s, returns the note
Listing list_in_child(const std::string& dir, uid_t uid, gid_t gid, int timeout_ms, const std::function<Listing()>& list,
                      const HashStep& hash = {});

// The child's report and its reading (exposed for tests): one line of note, then
// "SIZE\tMTIME\tRELATIVE-PATH" lines, then "end"; then (encode_digests) one
// "sha256\tHEX\tRELATIVE-PATH" line per digest and "hashed\tNOTE". decode_listing
// refuses paths that leave DIR; a report cut short after "end" keeps the listing and the
// digests that arrived, and says so.
std::string encode_listing(const Listing& l, const std::string& dir);
std::string encode_digests(const Listing& l, const std::string& dir, const std::string& note);
Listing decode_listing(const std::string& text, const std::string& dir);

}  // namespace saker::provenance::openlineage
