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
  std::string note;             // "" when the listing was whole, else why it is not
};

// "ckpt-" 12 digits ".h5": a checkpoint's main file (its shards are part of it).
bool is_checkpoint_name(std::string_view name);

// In this process: DIR and its direct subdirectories (links are not followed), regular
// files named like checkpoints, owned by `owner`, modified at or after `since_ns` (Unix
// nanoseconds: a checkpoint an earlier step wrote in the same second is not this step's).
Listing list_checkpoints(const std::string& dir, uid_t owner, std::int64_t since_ns);

// The same in a child running as uid/gid (the caller must be root, or be uid already),
// waited for at most `timeout_ms`; past it the child is abandoned and the note says so.
Listing list_checkpoints_as(const std::string& dir, uid_t uid, gid_t gid, std::int64_t since_ns, int timeout_ms);

// Now, in Unix nanoseconds, from the clock file systems stamp modification times with
// (CLOCK_REALTIME_COARSE): a file written after this call never has an earlier mtime.
std::int64_t step_start_ns();

// The mechanics of the above, exposed for tests: runs `list` in the child as uid/gid.
Listing list_in_child(const std::string& dir, uid_t uid, gid_t gid, int timeout_ms, const std::function<Listing()>& list);

// The child's report and its reading (exposed for tests): one line of note, then
// "SIZE\tMTIME\tRELATIVE-PATH" lines. decode_listing refuses paths that leave DIR.
std::string encode_listing(const Listing& l, const std::string& dir);
Listing decode_listing(const std::string& text, const std::string& dir);

}  // namespace saker::provenance::openlineage
