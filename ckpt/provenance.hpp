// A checkpoint's provenance record (issue 30): what every checkpoint libsaker_ckpt writes
// says about where it came from, stored in the main file's manifest, so the manifest's
// checksum (and, when encrypted, its GCM tag) covers it like any other field.
//
//  - the job attestation the site signed for the step (spank_saker.so puts its path in
//    SAKER_ATTESTATION), copied verbatim; the datasets it names are the enforced ones;
//  - the code: the program (or the script an interpreter runs) with its SHA-256, and the
//    git commit of the repository it lies in;
//  - the parents: the SHA-256 of every checkpoint this process loaded through
//    libsaker_ckpt (a resume, a fine-tune from another run's checkpoint), and of those
//    named in SAKER_CKPT_PARENTS (a sweep trial's lineage);
//  - the writer's SLURM_JOB_ID and SLURM_STEP_ID.
// The configuration and the datasets the program was told by flag (--lineage) are the
// manifest's own config and lineage fields, kept apart from the enforced ones.
//
// Only the attestation is the site's word: the rest is what the job's own process
// recorded. saker-ckpt provenance --verify (provenance_export.hpp) checks the signature
// and that the rest agrees with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace saker::ckpt::provenance {

struct Parent {
  std::string sha256;  // of the parent's main file
  std::string run_id;
  std::uint64_t step = 0;
  std::string file;    // where it was loaded from (informational)
  bool operator==(const Parent&) const = default;
};

struct Code {
  std::string path;         // the script an interpreter ran, else the program
  std::string sha256;       // of that file ("" when unreadable)
  std::string git_commit;   // of the repository holding it ("" when none)
  std::string interpreter;  // the interpreter's path, when `path` is a script
  bool operator==(const Code&) const = default;
};

struct Record {
  std::string job_id, step_id;      // the writer's SLURM_JOB_ID, SLURM_STEP_ID ("" outside Slurm)
  std::string attestation;          // the envelope file's text ("" when none)
  std::string attestation_note;     // why there is none, or ""
  std::vector<std::string> enforced;  // NAME[@VERSION] of the attestation's datasets
  Code code;
  std::vector<Parent> parents;
  bool operator==(const Record&) const = default;
};

std::string encode(const Record& r);
// Throws saker::Error naming `where` on anything malformed.
Record decode(const std::string& text, const std::string& where);

// What this process knows now: the attestation (SAKER_ATTESTATION), the code, the job
// ids and SAKER_CKPT_PARENTS, plus `loaded` (the checkpoints it loaded). Never throws:
// what cannot be read is left empty and said in attestation_note or logged.
Record collect(const std::vector<Parent>& loaded);
Code code_identity();  // computed once per process

// For bench/bench_ckpt alone: its peer "the same save without provenance" (issue 30 asks
// a save with provenance to stay within 1% of one without). While set, this process's
// saves write no provenance record, and its loads take no digest and name no parent.
// Process-wide; no Options field, file or environment variable reaches it, so a user's
// configuration cannot turn provenance off: only a program that calls it can.
void set_omitted_for_benchmark(bool omit);
bool omitted_for_benchmark();

// SHA-256 of a file's bytes (64 hex digits); throws saker::Error naming the file.
// drop_behind: each piece's page-cache pages are dropped once hashed (as a load does).
std::string file_sha256(const std::filesystem::path& file, bool drop_behind = false);

}  // namespace saker::ckpt::provenance
