// The job attestation: what the site states about one job step, signed with the site's
// Ed25519 key by spank_saker.so in slurmstepd (as root) when the step starts.
//
// The payload is a canonical text (one "key=value" line per field, fixed order; parsing
// refuses anything else), wrapped in a DSSE envelope (in-toto's signature envelope: the
// signature covers PAE(payloadType, payload), so a payload cannot be read as another
// type). The task gets the envelope as a file owned by root that it can read but not
// write (SAKER_ATTESTATION); libsaker_ckpt copies it into each checkpoint. Anyone with
// the site's public key verifies it; nobody without the private key can make one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "provenance/site_key.hpp"

namespace saker::provenance {

inline constexpr const char* kPayloadType = "application/vnd.saker.job-attestation.v1";

struct AttestedDataset {
  std::string name;
  std::string version;          // "" when the job named no version
  std::string policy_revision;  // the revision of the policy that admitted it ("" when none)
  std::string digest;           // content digest from the policy's registry ("" when it has none)
  std::string ref() const { return version.empty() ? name : name + "@" + version; }
  bool operator==(const AttestedDataset&) const = default;
};

struct Attestation {
  std::string job_id;     // as Slurm prints it: 123, or 123_4 for an array task
  std::string step_id;    // 0, 1, ..., batch, extern, interactive
  std::string array_job_id, array_task_id;  // "" outside arrays
  std::string user;
  std::uint32_t uid = 0;
  std::string account, partition, zone;
  std::string nodes;      // the job's node list (hostlist form)
  std::string node;       // the node that signed
  std::int64_t time_unix = 0;
  std::vector<AttestedDataset> datasets;  // what job_submit admitted (the node record), never the task's env
  std::string audit_log;  // whose head follows ("" when none is configured)
  std::string audit_head; // "ID:HASH" of its last record, "" when it has no readable head
  bool operator==(const Attestation&) const = default;
};

std::string format_payload(const Attestation& a);
// Throws saker::Error naming `where` on anything but a payload format_payload() writes.
Attestation parse_payload(const std::string& text, const std::string& where);

// DSSE's pre-authentication encoding: what the signature covers.
std::string pae(const std::string& payload_type, const std::string& payload);

struct Envelope {
  std::string payload_type = kPayloadType;
  std::string payload;    // the bytes signed (format_payload)
  std::string key_id;     // hex SHA-256 of the signer's public key
  std::string signature;  // 64 raw bytes
};

Envelope sign(const Attestation& a, const SiteKey& key);

// The attestation file's text ("saker-attestation 1", one field a line, base64 values).
std::string format_envelope(const Envelope& e);
// Throws saker::Error naming `where` on anything malformed.
Envelope parse_envelope(const std::string& text, const std::string& where);
// The envelope in DSSE's JSON form ({"payloadType", "payload", "signatures"}).
std::string envelope_json(const Envelope& e);

// Checks the envelope against the site's public key: the payload type, the key id and the
// Ed25519 signature over PAE. Returns the attestation, or throws saker::Error with the
// reason (another key, a bad signature, a malformed payload).
Attestation verify_envelope(const Envelope& e, const PublicSiteKey& key);

}  // namespace saker::provenance
