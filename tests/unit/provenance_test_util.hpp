// Helpers for the attestation and provenance tests: Ed25519 site keys made by the openssl
// command (so every test also checks that Saker reads what OpenSSL writes) and a signed
// attestation of a typical job.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/file.hpp"
#include "provenance/attestation.hpp"

namespace saker::provenance::testing {

struct KeyPair {
  std::string private_path, public_path;
};

// A fresh key pair under `dir` (private key mode 0600, owned by the caller).
inline KeyPair make_keys(const std::filesystem::path& dir, const std::string& name) {
  KeyPair k{(dir / (name + ".key")).string(), (dir / (name + ".pub")).string()};
  const std::string cmd = "umask 077 && openssl genpkey -algorithm ed25519 -out '" + k.private_path +
                          "' 2>/dev/null && openssl pkey -in '" + k.private_path + "' -pubout -out '" + k.public_path +
                          "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) std::abort();
  return k;
}

inline Attestation sample_attestation(const std::string& job_id = "4242") {
  Attestation a;
  a.job_id = job_id;
  a.step_id = "0";
  a.user = "saker-alice";
  a.uid = 1001;
  a.account = "radiology";
  a.partition = "ae";
  a.zone = "AE";
  a.nodes = "saker[1-2]";
  a.node = "saker1";
  a.time_unix = 1700000000;
  a.datasets = {{"patients", "v3", "f00d", ""}, {"imagenet", "2012", "f00d", "ab12"}};
  a.audit_log = "/var/spool/saker/saker1/launch-audit.log";
  a.audit_head = "7:0123abcd";
  return a;
}

inline std::string signed_text(const Attestation& a, const KeyPair& k) {
  return format_envelope(sign(a, read_site_key(k.private_path, ::geteuid())));
}

}  // namespace saker::provenance::testing
