// saker-ckpt provenance: a checkpoint's provenance as an in-toto Statement v1 with a SLSA
// Provenance v1 predicate, and the check of its whole chain against the site's key.
//
// Statement: the subject is each file of the checkpoint with its SHA-256 (the main file
// first; its digest is what children name as their parent). The predicate's
// resolvedDependencies are the enforced datasets (from the signed attestation), the
// datasets the program was told by flag (--lineage), the code and the parents; the
// attestation's DSSE envelope is inside, as a byproduct, for anyone to verify with the
// site's public key.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/provenance.hpp"
#include "provenance/site_key.hpp"

namespace saker::ckpt::provenance {

// Throws saker::Error when the file is not a readable checkpoint.
std::string statement_json(const std::filesystem::path& main_file);

struct ChainCheck {
  std::vector<std::string> problems;  // each names the checkpoint, what is wrong and why it matters
  std::vector<std::string> checked;   // the checkpoints whose provenance verified, child first
  bool ok() const { return problems.empty(); }
};

// The whole chain: every byte's checksums (saker-ckpt verify), the attestation's Ed25519
// signature under `key`, the record's agreement with it (job, step, every enforced dataset,
// written after the step started), and the parents: well-formed, not the checkpoint itself,
// and, when `search` holds directories, found there by digest and checked the same way
// (a missing parent breaks the chain, a parent met twice on one path is a cycle).
ChainCheck verify_chain(const std::filesystem::path& main_file, const saker::provenance::PublicSiteKey& key,
                        const std::vector<std::filesystem::path>& search = {});

}  // namespace saker::ckpt::provenance
