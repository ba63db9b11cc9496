#include "provenance/attestation.hpp"

#include <cstring>
#include <string_view>

#include "common/error.hpp"
#include "common/json.hpp"
#include "provenance/text.hpp"

namespace saker::provenance {
namespace {

constexpr std::string_view kPayloadHead = "saker-job-attestation 1";
constexpr std::string_view kEnvelopeHead = "saker-attestation 1";

// A value must stay on its line: a newline would let one field forge the next.
const std::string& one_line(const std::string& v, const char* field) {
  if (v.find_first_of("\n\r\t") != std::string::npos)
    throw Error(explain(std::string("attestation field ") + field, "holds a newline or tab", "this is a bug; report it"));
  return v;
}

// Splits text into lines; the text must end with a newline.
std::vector<std::string_view> lines_of(std::string_view text, const std::string& where) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) throw Error(explain(where, "the last line has no newline", "the attestation is damaged"));
    out.push_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
    if (out.size() > 4096) throw Error(explain(where, "more than 4096 lines", "the attestation is damaged"));
  }
  return out;
}

// Consumes "key=value" at lines[i] and returns the value; throws unless the key matches.
std::string take(const std::vector<std::string_view>& lines, std::size_t& i, std::string_view key, const std::string& where) {
  if (i >= lines.size() || lines[i].size() <= key.size() || lines[i].substr(0, key.size()) != key ||
      lines[i][key.size()] != '=')
    throw Error(explain(where, "expected the field '" + std::string(key) + "' at line " + std::to_string(i + 1),
                        "the attestation is damaged or was not written by Saker"));
  return std::string(lines[i++].substr(key.size() + 1));
}

std::uint64_t number(const std::string& s, const std::string& where, const char* field) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error(explain(where, std::string("field ") + field + " is not a number", "the attestation is damaged"));
  return std::stoull(s);
}

AttestedDataset parse_dataset(const std::string& v, const std::string& where) {
  std::vector<std::string> f;
  std::size_t from = 0;
  for (;;) {
    const auto tab = v.find('\t', from);
    f.push_back(v.substr(from, tab - from));
    if (tab == std::string::npos) break;
    from = tab + 1;
  }
  if (f.size() != 4 || f[0].empty())
    throw Error(explain(where, "a dataset line has " + std::to_string(f.size()) + " fields, not 4", "the attestation is damaged"));
  return {f[0], f[1], f[2], f[3]};
}

}  // namespace

std::string format_payload(const Attestation& a) {
  std::string out(kPayloadHead);
  out += '\n';
  auto put = [&out](const char* key, const std::string& v) { out += std::string(key) + "=" + one_line(v, key) + "\n"; };
  put("job_id", a.job_id);
  put("step_id", a.step_id);
  put("array_job_id", a.array_job_id);
  put("array_task_id", a.array_task_id);
  put("user", a.user);
  put("uid", std::to_string(a.uid));
  put("account", a.account);
  put("partition", a.partition);
  put("zone", a.zone);
  put("nodes", a.nodes);
  put("node", a.node);
  put("time_unix", std::to_string(a.time_unix));
  for (const AttestedDataset& d : a.datasets)  // tab-separated: NAME VERSION REVISION DIGEST
    out += "dataset=" + one_line(d.name, "dataset") + "\t" + one_line(d.version, "dataset") + "\t" +
           one_line(d.policy_revision, "dataset") + "\t" + one_line(d.digest, "dataset") + "\n";
  put("audit_log", a.audit_log);
  put("audit_head", a.audit_head);
  return out;
}

Attestation parse_payload(const std::string& text, const std::string& where) {
  const auto lines = lines_of(text, where);
  if (lines.empty() || lines[0] != kPayloadHead)
    throw Error(explain(where, "not a Saker job attestation", "give the file spank_saker.so wrote (SAKER_ATTESTATION)"));
  std::size_t i = 1;
  Attestation a;
  a.job_id = take(lines, i, "job_id", where);
  a.step_id = take(lines, i, "step_id", where);
  a.array_job_id = take(lines, i, "array_job_id", where);
  a.array_task_id = take(lines, i, "array_task_id", where);
  a.user = take(lines, i, "user", where);
  const std::uint64_t uid = number(take(lines, i, "uid", where), where, "uid");
  if (uid > 0xffffffffu) throw Error(explain(where, "uid out of range", "the attestation is damaged"));
  a.uid = static_cast<std::uint32_t>(uid);
  a.account = take(lines, i, "account", where);
  a.partition = take(lines, i, "partition", where);
  a.zone = take(lines, i, "zone", where);
  a.nodes = take(lines, i, "nodes", where);
  a.node = take(lines, i, "node", where);
  a.time_unix = static_cast<std::int64_t>(number(take(lines, i, "time_unix", where), where, "time_unix"));
  while (i < lines.size() && lines[i].substr(0, 8) == "dataset=") a.datasets.push_back(parse_dataset(take(lines, i, "dataset", where), where));
  a.audit_log = take(lines, i, "audit_log", where);
  a.audit_head = take(lines, i, "audit_head", where);
  if (i != lines.size()) throw Error(explain(where, "unexpected line " + std::to_string(i + 1), "the attestation is damaged"));
  if (a.job_id.empty()) throw Error(explain(where, "no job id", "the attestation is damaged"));
  return a;
}

std::string pae(const std::string& payload_type, const std::string& payload) {
  return "DSSEv1 " + std::to_string(payload_type.size()) + " " + payload_type + " " + std::to_string(payload.size()) + " " +
         payload;
}

Envelope sign(const Attestation& a, const SiteKey& key) {
  Envelope e;
  e.payload = format_payload(a);
  e.key_id = key.key_id;
  const auto sig = ed25519::sign(key.seed, key.pub, pae(e.payload_type, e.payload));
  e.signature.assign(reinterpret_cast<const char*>(sig.data()), sig.size());
  return e;
}

std::string format_envelope(const Envelope& e) {
  return std::string(kEnvelopeHead) + "\n" + "payload_type " + e.payload_type + "\n" + "keyid " + e.key_id + "\n" +
         "payload " + base64_encode(e.payload) + "\n" + "sig " + base64_encode(e.signature) + "\n";
}

Envelope parse_envelope(const std::string& text, const std::string& where) {
  if (text.size() > (1u << 20)) throw Error(explain(where, "larger than 1 MiB", "not an attestation"));
  const auto lines = lines_of(text, where);
  if (lines.size() != 5 || lines[0] != kEnvelopeHead)
    throw Error(explain(where, "not a Saker attestation envelope", "give the file spank_saker.so wrote (SAKER_ATTESTATION)"));
  auto field = [&](std::size_t i, std::string_view key) {
    if (lines[i].substr(0, key.size() + 1) != std::string(key) + " ")
      throw Error(explain(where, "expected '" + std::string(key) + "' at line " + std::to_string(i + 1), "the attestation is damaged"));
    return std::string(lines[i].substr(key.size() + 1));
  };
  Envelope e;
  e.payload_type = field(1, "payload_type");
  e.key_id = field(2, "keyid");
  const auto payload = base64_decode(field(3, "payload"));
  const auto sig = base64_decode(field(4, "sig"));
  if (!payload || !sig) throw Error(explain(where, "the payload or signature is not valid base64", "the attestation is damaged"));
  e.payload = *payload;
  e.signature = *sig;
  return e;
}

std::string envelope_json(const Envelope& e) {
  json::Writer w;
  w.begin_object().key("payloadType").value(e.payload_type).key("payload").value(base64_encode(e.payload));
  w.key("signatures").begin_array().begin_object().key("keyid").value(e.key_id).key("sig").value(base64_encode(e.signature));
  w.end_object().end_array().end_object();
  return w.str();
}

Attestation verify_envelope(const Envelope& e, const PublicSiteKey& key) {
  if (e.payload_type != kPayloadType)
    throw Error(explain("attestation", "payload type '" + e.payload_type + "', not " + kPayloadType, "not a Saker job attestation"));
  if (e.key_id != key.key_id)
    throw Error(explain("attestation", "signed by key " + e.key_id.substr(0, 16) + "..., not the given site key " +
                                           key.key_id.substr(0, 16) + "...",
                        "verify with the public key of the site that ran the job (or the attestation is forged)"));
  if (e.signature.size() != 64)
    throw Error(explain("attestation", "the signature is " + std::to_string(e.signature.size()) + " bytes, not 64", "it is forged or damaged"));
  ed25519::Signature sig{};
  std::memcpy(sig.data(), e.signature.data(), sig.size());
  if (!ed25519::verify(key.pub, pae(e.payload_type, e.payload), sig))
    throw Error(explain("attestation", "the Ed25519 signature does not match its contents under the site key",
                        "the attestation was altered or forged; do not trust this provenance"));
  return parse_payload(e.payload, "attestation payload");
}

}  // namespace saker::provenance
