// A trial's parent checkpoint (issue 30): what a segment of a trial starts from, stated to
// the trial's program in SAKER_CKPT_PARENTS so that its checkpoints record it
// (ckpt/provenance.hpp) and saker-ckpt find and provenance trace the trial both ways.
//
// What saker-sweep starts a trial from: its own lineage. Every segment after the first (the
// next rung, an ASHA promotion, a requeued or interrupted trial taken up again) resumes
// from the newest checkpoint there that verifies, the one libsaker_ckpt's load_latest
// picks. A program that loads it through libsaker_ckpt records that parent itself; one that
// resumes any other way (its own reader, a script that only reads the weights) records it
// only through this. A trial's first segment starts from what saker-sweep's own
// SAKER_CKPT_PARENTS names, if anything (a sweep warm-started from one checkpoint: export
// it for `saker-sweep submit`); a later one from its lineage alone, which descends from it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "sweep/process.hpp"

namespace saker::sweep {

// The newest checkpoint of `lineage` that verifies; nullopt when none does (or none exists).
std::optional<std::filesystem::path> resume_point(const std::filesystem::path& lineage);

// SAKER_CKPT_PARENTS for a segment starting in `lineage`: "sha256:HEX" of resume_point(lineage)
// when there is one, else `inherited` (this process's own value, "" when unset). Throws
// saker::Error naming the checkpoint when it cannot be read.
std::string segment_parents(const std::filesystem::path& lineage, const std::string& inherited);

// Adds SAKER_CKPT_PARENTS (from segment_parents and this process's environment) to `cmd`.
void add_parents(Command& cmd, const std::filesystem::path& lineage);

}  // namespace saker::sweep
