#include "ckpt/provenance_export.hpp"

#include <ctime>
#include <map>
#include <set>

#include "ckpt/format.hpp"
#include "common/error.hpp"
#include "common/utc_time.hpp"
#include "common/json.hpp"
#include "provenance/attestation.hpp"
#include "provenance/text.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt::provenance {
namespace fs = std::filesystem;
namespace pv = saker::provenance;

namespace {

constexpr const char* kBuildType = "https://github.com/saker-hpc/saker/ckpt/training/v1";
constexpr std::int64_t kClockSlack = 300;  // seconds a node's clock may differ from another's


struct Loaded {
  CheckpointInfo info;
  Record record;
  bool has_record = false;
  std::vector<fs::path> files;
};

Loaded load(const fs::path& file) {
  Loaded l;
  l.info = describe(file);
  l.files = format::Reader(file).files();
  if (!l.info.provenance.empty()) {
    l.record = decode(l.info.provenance, file.string());
    l.has_record = true;
  }
  return l;
}

void dataset_dep(json::Writer& w, const std::string& ref, bool enforced, const pv::AttestedDataset* att) {
  w.begin_object().key("name").value("dataset:" + ref).key("uri").value("saker-dataset:" + ref);
  if (att != nullptr && !att->digest.empty()) w.key("digest").begin_object().key("sha256").value(att->digest).end_object();
  w.key("annotations").begin_object().key("enforced").value(enforced);
  w.key("source").value(enforced ? "job_submit (signed attestation)" : "the program's --lineage (not enforced)");
  if (att != nullptr) w.key("policyRevision").value(att->policy_revision);
  w.end_object().end_object();
}

void job_object(json::Writer& w, const pv::Attestation& a) {
  w.begin_object().key("jobId").value(a.job_id).key("stepId").value(a.step_id);
  if (!a.array_job_id.empty()) w.key("arrayJobId").value(a.array_job_id).key("arrayTaskId").value(a.array_task_id);
  w.key("user").value(a.user).key("uid").value(static_cast<std::uint64_t>(a.uid)).key("account").value(a.account);
  w.key("partition").value(a.partition).key("zone").value(a.zone).key("nodes").value(a.nodes).key("node").value(a.node);
  w.key("time").value(saker::utc_iso(a.time_unix)).key("auditLog").value(a.audit_log).key("auditHead").value(a.audit_head);
  w.end_object();
}

void dependencies(json::Writer& w, const Loaded& l, const pv::Attestation* att) {
  w.key("resolvedDependencies").begin_array();
  std::set<std::string> enforced;
  if (att != nullptr)
    for (const auto& d : att->datasets) {
      dataset_dep(w, d.ref(), true, &d);
      enforced.insert(d.ref());
    }
  for (const auto& d : l.info.lineage)
    if (!enforced.count(d.str())) dataset_dep(w, d.str(), false, nullptr);
  const Code& c = l.record.code;
  if (!c.path.empty()) {
    w.begin_object().key("name").value("code:" + c.path).key("uri").value("file://" + c.path);
    w.key("digest").begin_object();
    if (!c.sha256.empty()) w.key("sha256").value(c.sha256);
    if (!c.git_commit.empty()) w.key("gitCommit").value(c.git_commit);
    w.end_object();
    if (!c.interpreter.empty()) w.key("annotations").begin_object().key("interpreter").value(c.interpreter).end_object();
    w.end_object();
  }
  for (const Parent& p : l.record.parents) {
    w.begin_object().key("name").value("parent:" + (p.file.empty() ? p.sha256 : p.file));
    w.key("digest").begin_object().key("sha256").value(p.sha256).end_object();
    w.key("annotations").begin_object().key("runId").value(p.run_id).key("step").value(p.step).end_object();
    w.end_object();
  }
  w.end_array();
}

}  // namespace

std::string statement_json(const fs::path& main_file) {
  const Loaded l = load(main_file);
  std::optional<pv::Envelope> env;
  std::optional<pv::Attestation> att;
  if (!l.record.attestation.empty()) {
    env = pv::parse_envelope(l.record.attestation, main_file.string() + ": attestation");
    att = pv::parse_payload(env->payload, main_file.string() + ": attestation");  // shown; --verify checks it
  }
  json::Writer w;
  w.begin_object().key("_type").value("https://in-toto.io/Statement/v1").key("subject").begin_array();
  for (const fs::path& f : l.files)
    w.begin_object().key("name").value(f.filename().string()).key("digest").begin_object().key("sha256").value(file_sha256(f)).end_object().end_object();
  w.end_array().key("predicateType").value("https://slsa.dev/provenance/v1").key("predicate").begin_object();
  w.key("buildDefinition").begin_object().key("buildType").value(kBuildType);
  w.key("externalParameters").begin_object().key("config").value(l.info.config);
  w.key("lineage").value(format_lineage(l.info.lineage)).end_object();
  w.key("internalParameters").begin_object().key("runId").value(l.info.run_id).key("step").value(l.info.step);
  w.key("writerJobId").value(l.record.job_id).key("writerStepId").value(l.record.step_id);
  if (att) w.key("job"), job_object(w, *att);
  else w.key("unattested").value(l.has_record ? l.record.attestation_note : "no provenance record (written before Saker recorded one)");
  w.end_object();
  dependencies(w, l, att ? &*att : nullptr);
  w.end_object();
  w.key("runDetails").begin_object().key("builder").begin_object();
  w.key("id").value(env ? "https://github.com/saker-hpc/saker/spank_saker/site-key/" + env->key_id : "unattested").end_object();
  w.key("metadata").begin_object().key("invocationId").value(att ? "slurm:" + att->job_id + "." + att->step_id : "");
  if (att) w.key("startedOn").value(saker::utc_iso(att->time_unix));
  w.key("finishedOn").value(saker::utc_iso(l.info.created_unix)).end_object();
  w.key("byproducts").begin_array();
  if (env)
    w.begin_object().key("name").value("saker-job-attestation").key("mediaType").value("application/vnd.dsse.envelope.v1+json")
        .key("content").value(pv::base64_encode(pv::envelope_json(*env))).end_object();
  w.end_array().end_object().end_object().end_object();
  return w.str();
}

namespace {

// Checks one checkpoint's own provenance; returns its main file's digest ("" when unreadable).
std::string check_one(const fs::path& file, const pv::PublicSiteKey& key, ChainCheck& out, Loaded* loaded) {
  const std::string name = file.string();
  auto problem = [&](const std::string& why) { out.problems.push_back(name + ": " + why); };
  const Verdict v = verify(file);
  if (!v.ok) {
    problem("integrity: " + v.problem);
    return "";
  }
  Loaded& l = *loaded;
  try {
    l = load(file);
  } catch (const std::exception& e) {
    problem(e.what());
    return "";
  }
  const std::string digest = file_sha256(file);
  if (!l.has_record) {
    problem("no provenance record: written by a Saker that did not record one, or the record was removed");
    return digest;
  }
  const std::size_t before = out.problems.size();
  if (l.record.attestation.empty()) {
    problem("unattested: " + (l.record.attestation_note.empty() ? std::string("no attestation") : l.record.attestation_note));
  } else {
    try {
      const pv::Attestation a = pv::verify_envelope(pv::parse_envelope(l.record.attestation, "attestation"), key);
      if (l.record.job_id != a.job_id)
        problem("the attestation is of job " + a.job_id + " but the checkpoint was written by job " +
                (l.record.job_id.empty() ? "(none)" : l.record.job_id) + ": it belongs to another job");
      else if (!l.record.step_id.empty() && l.record.step_id != a.step_id)
        problem("the attestation is of step " + a.job_id + "." + a.step_id + " but the checkpoint was written by step " +
                l.record.job_id + "." + l.record.step_id + ": it belongs to another step");
      if (l.info.created_unix + kClockSlack < a.time_unix)
        problem("written at " + saker::utc_iso(l.info.created_unix) + ", before its attested step started (" + saker::utc_iso(a.time_unix) +
                "): the attestation was attached afterwards");
      std::vector<std::string> signed_refs;
      for (const auto& d : a.datasets) signed_refs.push_back(d.ref());
      for (const auto& d : signed_refs)
        if (std::find(l.record.enforced.begin(), l.record.enforced.end(), d) == l.record.enforced.end())
          problem("dataset " + d + " of the signed attestation is missing from the checkpoint's provenance");
      for (const auto& d : l.record.enforced)
        if (std::find(signed_refs.begin(), signed_refs.end(), d) == signed_refs.end())
          problem("the provenance names " + d + " as enforced, but the signed attestation does not");
    } catch (const std::exception& e) {
      problem(e.what());
    }
  }
  for (const Parent& p : l.record.parents)
    if (p.sha256 == digest) problem("names itself as its own parent (a cycle)");
  if (out.problems.size() == before) out.checked.push_back(name);
  return digest;
}

void walk(const fs::path& file, const pv::PublicSiteKey& key, const std::map<std::string, fs::path>& index, bool search,
          std::vector<std::string>& path, ChainCheck& out) {
  Loaded l;
  const std::string digest = check_one(file, key, out, &l);
  if (digest.empty() || !search) return;
  path.push_back(digest);
  for (const Parent& p : l.record.parents) {
    if (p.sha256 == digest) continue;  // said above
    if (std::find(path.begin(), path.end(), p.sha256) != path.end()) {
      out.problems.push_back(file.string() + ": parent " + p.sha256.substr(0, 16) + "... is also its descendant (a cycle)");
      continue;
    }
    const auto it = index.find(p.sha256);
    if (it == index.end()) {
      out.problems.push_back(file.string() + ": parent " + p.sha256.substr(0, 16) + "... (" + p.file +
                             ") is in none of the directories searched: the chain is broken");
      continue;
    }
    walk(it->second, key, index, search, path, out);
  }
  path.pop_back();
}

}  // namespace

ChainCheck verify_chain(const fs::path& main_file, const pv::PublicSiteKey& key, const std::vector<fs::path>& search) {
  std::map<std::string, fs::path> index;
  for (const fs::path& dir : search)
    for (const fs::path& f : list_checkpoints(dir)) {
      try {
        index.emplace(file_sha256(f), f);
      } catch (const std::exception&) {
      }
    }
  ChainCheck out;
  std::vector<std::string> path;
  walk(main_file, key, index, !search.empty(), path, out);
  return out;
}

}  // namespace saker::ckpt::provenance
