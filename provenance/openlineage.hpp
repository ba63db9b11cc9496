// OpenLineage RunEvents for job steps (issue 30 §3): what lineage servers such as Marquez
// and DataHub ingest. spank_saker.so (lineage_hook.hpp) writes one START when a step
// starts and one COMPLETE or FAIL when it ends into a site-configured directory
// (openlineage-dir= in plugstack.conf), from which the site's collector ships them.
//
// What an event states, and where it comes from:
//  - the run: a UUID stable for the step (the same on every node and in every event of the
//    step), so a server joins a step's START and its end;
//  - the job: namespace (openlineage-namespace=, the site's name for this cluster) and name
//    "USER.JOBNAME.STEP" (a recurring job in OpenLineage's sense is what a user submits
//    again under the same name);
//  - inputs: the datasets job_submit admitted (the node record's, as in the signed
//    attestation): namespace "saker-dataset" (the scheme of the in-toto statement's
//    "saker-dataset:NAME@VERSION" URIs), name NAME, OpenLineage's version facet, and a
//    "saker_dataset" facet with the admitting policy's revision;
//  - outputs (end events only): the checkpoints the step left in its checkpoint directory
//    (openlineage_outputs.hpp says how they are found, and why only at the end), as
//    OpenLineage names local files: namespace "file", name the absolute path; each with
//    the SHA-256 of its main file when the step's end could read it within its bounds:
//    OpenLineage's version facet ("version", datasetVersion "sha256:HEX", what a lineage
//    server keys a dataset's versions by) and the "saker_checkpoint" facet's "sha256"
//    (the same 64 digits as the subject of saker-ckpt provenance's in-toto statement and
//    the parent digests of its children);
//  - a custom run facet "saker_slurm": job, step and array ids, user, account, partition,
//    zone, nodes, the reporting node and the audit-log head; on FAIL, OpenLineage's
//    errorMessage facet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "provenance/attestation.hpp"

namespace saker::provenance::openlineage {

inline constexpr const char* kSchemaUrl = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";

enum class EventType { start, complete, fail };
const char* type_name(EventType t);  // "START", "COMPLETE", "FAIL"

struct Output {
  std::string path;  // absolute
  std::uint64_t size = 0;
  std::int64_t mtime_unix = 0;
  std::string sha256;  // of its bytes, 64 hex digits ("" when not read: StepEvent::outputs_note says why)
  bool operator==(const Output&) const = default;
};

struct StepEvent {
  EventType type = EventType::start;
  std::int64_t time_ms = 0;  // the event's time, Unix milliseconds
  std::string job_namespace = "slurm";
  std::string job_name;      // Slurm's job name ("" gives "job")
  Attestation facts;         // ids, user, zone, datasets, audit head: what the site knows (not signed here)
  std::uint32_t restart_count = 0;  // Slurm's: a requeued job runs its steps again, as new runs
  std::vector<Output> outputs;
  std::string outputs_note;  // why outputs may be incomplete ("" when the listing was whole)
  std::uint32_t tasks = 0, failed_tasks = 0;  // end events: this node's tasks and how many failed
  std::string error;         // FAIL: what failed, for the errorMessage facet
};

// A task of the step on this node ended with wait(2) status `status`: counted, and a
// failure (non-zero exit, a signal) described in `error` (the first; later ones counted).
void record_task_exit(StepEvent& e, int status);
// Turns the START event into the step's end event: FAIL when a task failed, else COMPLETE.
void finish(StepEvent& e, std::int64_t time_ms);

// The step's run id: a UUID (RFC 9562 version 8, name-based on SHA-256) of the namespace,
// job id, step and restart count, so every node computes the same one without talking to
// the others, and a requeued job's steps are new runs.
std::string run_id(const std::string& job_namespace, const Attestation& facts, std::uint32_t restart_count = 0);

// ISO 8601 UTC with milliseconds: "2026-11-27T12:47:01.042Z".
std::string event_time(std::int64_t unix_ms);

// "USER.JOBNAME.STEP", with '/' and control characters of the job name replaced by '_'.
std::string job_name(const StepEvent& e);

// The RunEvent as one line of JSON (no trailing newline).
std::string event_json(const StepEvent& e);

// "job-J.STEP.NODE.TYPE.json" (J is "A_T" for an array task; NODE is followed by ".rN"
// when a requeued job runs for the Nth time again). Throws saker::Error when the
// ids or the node name could make a path ('/', "..", control characters).
std::string event_file_name(const StepEvent& e);

// Writes `json` plus a newline into DIR/`name` atomically: a temporary ".name.*.tmp"
// created O_EXCL|O_NOFOLLOW relative to the opened directory, then renamed without
// replacing anything (a planted file or link keeps its place; the event gets ".2", ".3"...).
// DIR must be a real directory of this euid that nobody else may write (created 0750 when
// missing; its parent must exist). The file is mode 0640, group DIR's group: the site
// grants its collector read access by that group. Returns "" or the problem, naming the
// path and the fix.
std::string write_event(const std::string& dir, const std::string& name, const std::string& json);

}  // namespace saker::provenance::openlineage
