#include "provenance/openlineage.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "common/json.hpp"
#include "common/utc_time.hpp"
#include "config.h"
#include "provenance/text.hpp"

namespace saker::provenance::openlineage {
namespace {

constexpr const char* kProducer = "https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION "/plugins/spank";
// Saker's own facets: their JSON schema is provenance/openlineage-facets.json (ours).
constexpr const char* kSlurmFacetSchema =
    "https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION "/provenance/openlineage-facets.json#/$defs/SakerSlurmRunFacet";
constexpr const char* kDatasetFacetSchema =
    "https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION "/provenance/openlineage-facets.json#/$defs/SakerDatasetInputFacet";
constexpr const char* kCheckpointFacetSchema =
    "https://github.com/saker-hpc/saker/tree/v" PACKAGE_VERSION "/provenance/openlineage-facets.json#/$defs/SakerCheckpointOutputFacet";
constexpr const char* kVersionFacetSchema =
    "https://openlineage.io/spec/facets/1-0-0/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet";
constexpr const char* kErrorFacetSchema =
    "https://openlineage.io/spec/facets/1-0-0/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";

void facet_head(json::Writer& w, const char* key, const char* schema) {
  w.key(key).begin_object().key("_producer").value(kProducer).key("_schemaURL").value(schema);
}

void slurm_facet(json::Writer& w, const StepEvent& e) {
  const Attestation& a = e.facts;
  facet_head(w, "saker_slurm", kSlurmFacetSchema);
  w.key("jobId").value(a.job_id).key("stepId").value(a.step_id);
  if (!a.array_job_id.empty()) w.key("arrayJobId").value(a.array_job_id).key("arrayTaskId").value(a.array_task_id);
  w.key("user").value(a.user).key("uid").value(static_cast<std::uint64_t>(a.uid)).key("account").value(a.account);
  w.key("partition").value(a.partition).key("zone").value(a.zone).key("nodes").value(a.nodes).key("node").value(a.node);
  w.key("auditLog").value(a.audit_log).key("auditHead").value(a.audit_head);
  w.key("restartCount").value(static_cast<std::uint64_t>(e.restart_count));
  if (e.type != EventType::start) {
    w.key("tasks").value(static_cast<std::uint64_t>(e.tasks)).key("failedTasks").value(static_cast<std::uint64_t>(e.failed_tasks));
    if (!e.outputs_note.empty()) w.key("outputsNote").value(e.outputs_note);
  }
  w.end_object();
}

void run(json::Writer& w, const StepEvent& e) {
  w.key("run").begin_object().key("runId").value(run_id(e.job_namespace, e.facts, e.restart_count)).key("facets").begin_object();
  slurm_facet(w, e);
  if (e.type == EventType::fail) {
    facet_head(w, "errorMessage", kErrorFacetSchema);
    w.key("message").value(e.error.empty() ? "the step failed" : e.error).key("programmingLanguage").value("unknown");
    w.end_object();
  }
  w.end_object().end_object();
}

void inputs(json::Writer& w, const StepEvent& e) {
  w.key("inputs").begin_array();
  for (const AttestedDataset& d : e.facts.datasets) {
    w.begin_object().key("namespace").value("saker-dataset").key("name").value(d.name);
    w.key("facets").begin_object();
    if (!d.version.empty()) {
      facet_head(w, "version", kVersionFacetSchema);
      w.key("datasetVersion").value(d.version).end_object();
    }
    w.end_object().key("inputFacets").begin_object();
    facet_head(w, "saker_dataset", kDatasetFacetSchema);
    w.key("ref").value(d.ref()).key("enforced").value(true).key("policyRevision").value(d.policy_revision);
    if (!d.digest.empty()) w.key("digest").value(d.digest);
    w.end_object().end_object().end_object();
  }
  w.end_array();
}

void outputs(json::Writer& w, const StepEvent& e) {
  w.key("outputs").begin_array();
  for (const Output& o : e.outputs) {
    w.begin_object().key("namespace").value("file").key("name").value(o.path);
    if (!o.sha256.empty()) {
      // OpenLineage's own dataset version: what Marquez and DataHub key a dataset's versions by.
      w.key("facets").begin_object();
      facet_head(w, "version", kVersionFacetSchema);
      w.key("datasetVersion").value("sha256:" + o.sha256).end_object().end_object();
    }
    w.key("outputFacets").begin_object();
    facet_head(w, "saker_checkpoint", kCheckpointFacetSchema);
    w.key("size").value(o.size).key("modified").value(utc_iso(o.mtime_unix));
    if (!o.sha256.empty()) w.key("sha256").value(o.sha256);
    w.end_object().end_object().end_object();
  }
  w.end_array();
}

// A file-name part: what a Slurm id or node name holds, nothing that could make a path.
void check_part(const std::string& part, const std::string& what) {
  bool ok = !part.empty() && part != "." && part != "..";
  for (char c : part) ok = ok && c != '/' && static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
  if (!ok)
    throw Error(explain("OpenLineage event: the " + what + " '" + part + "' cannot be part of a file name",
                        "it is empty or holds '/', a space or a control character", "report this to the Saker developers"));
}

}  // namespace

const char* type_name(EventType t) {
  switch (t) {
    case EventType::start: return "START";
    case EventType::complete: return "COMPLETE";
    case EventType::fail: return "FAIL";
  }
  return "OTHER";
}

void record_task_exit(StepEvent& e, int status) {
  ++e.tasks;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (e.failed_tasks++ > 0) return;
  e.error = "a task on " + e.facts.node + ": " +
            (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                 : "exit code " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status));
}

void finish(StepEvent& e, std::int64_t time_ms) {
  e.type = e.failed_tasks > 0 ? EventType::fail : EventType::complete;
  if (e.failed_tasks > 1) e.error += " (" + std::to_string(e.failed_tasks) + " of " + std::to_string(e.tasks) + " tasks failed)";
  e.time_ms = time_ms;
}

std::string run_id(const std::string& job_namespace, const Attestation& a, std::uint32_t restart_count) {
  const std::string name = "saker-openlineage-run-v1\n" + job_namespace + "\n" + a.job_id + "\n" + a.array_job_id + "_" +
                           a.array_task_id + "\n" + a.step_id + "\n" + std::to_string(restart_count);
  std::string b = *unhex(sha256_hex(name).substr(0, 32));
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x80);  // version 8
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);  // RFC 9562 variant
  const std::string h = hex(b);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

std::string event_time(std::int64_t unix_ms) {
  const std::int64_t s = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;
  std::string t = utc_iso(s);  // "...:SSZ"
  char ms[8];
  std::snprintf(ms, sizeof ms, ".%03d", static_cast<int>(unix_ms - s * 1000));
  return t.insert(t.size() - 1, ms);
}

std::string job_name(const StepEvent& e) {
  std::string name = e.job_name.empty() ? "job" : e.job_name.substr(0, 200);
  for (char& c : name)
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return e.facts.user + "." + name + "." + e.facts.step_id;
}

std::string event_json(const StepEvent& e) {
  json::Writer w;
  w.begin_object().key("eventType").value(type_name(e.type)).key("eventTime").value(event_time(e.time_ms));
  run(w, e);
  w.key("job").begin_object().key("namespace").value(e.job_namespace).key("name").value(job_name(e)).end_object();
  inputs(w, e);
  outputs(w, e);
  w.key("producer").value(kProducer).key("schemaURL").value(kSchemaUrl).end_object();
  return w.str();
}

std::string event_file_name(const StepEvent& e) {
  const Attestation& a = e.facts;
  const std::string job = a.array_job_id.empty() ? a.job_id : a.array_job_id + "_" + a.array_task_id;
  check_part(job, "job id");
  check_part(a.step_id, "step");
  check_part(a.node, "node name");
  const std::string restart = e.restart_count > 0 ? ".r" + std::to_string(e.restart_count) : "";
  return "job-" + job + "." + a.step_id + "." + a.node + restart + "." + type_name(e.type) + ".json";
}

}  // namespace saker::provenance::openlineage
