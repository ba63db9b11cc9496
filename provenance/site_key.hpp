// The site's attestation key files, in the PEM forms OpenSSL writes:
//   openssl genpkey -algorithm ed25519 -out /etc/slurm/saker-attest.key   (PKCS#8, "PRIVATE KEY")
//   openssl pkey -in /etc/slurm/saker-attest.key -pubout -out saker-attest.pub  ("PUBLIC KEY")
//
// The private key signs every job attestation, so whoever reads it can forge them: it is
// refused unless it is a regular file owned by root that neither group nor others may
// read or write (the error names the file, its owner and mode, and the fix).
#pragma once

#include <string>

#include "provenance/ed25519.hpp"

namespace saker::provenance {

struct SiteKey {
  ed25519::Seed seed{};
  ed25519::PublicKey pub{};
  std::string key_id;   // hex SHA-256 of the raw public key
  std::string file_id;  // the key file as read: device, inode, mtime and size ("" from PEM text)
  bool pub_known = false;  // pub came from a KnownPublicKey, not derived from the seed
};

// A public key derived from the key file earlier (the job prolog's, kept in the node
// record): deriving it costs a scalar multiplication, as much as a signature, and every
// step on every node signs. Used only while the file's identity is still `file_id`; a
// replaced or rewritten key file is derived afresh. And only with a `binding` that the seed
// read now gives for it (key_binding): a wrong public key beside the right seed would sign
// with a mismatched pair, and two signatures of one message under two public keys give the
// private key away (ed25519.hpp). The file's identity alone could stay the same over a key
// rewritten in place within one mtime tick; the binding cannot.
struct KnownPublicKey {
  std::string file_id;
  ed25519::PublicKey pub{};
  std::string binding;
};

// Hex SHA-256 over a label, the seed and the public key: what a KnownPublicKey must carry
// to be used for this seed. Only whoever holds the seed can make it (the note is root's).
std::string key_binding(const ed25519::Seed& seed, const ed25519::PublicKey& pub);

// `owner_uid`: the owner the file must have (0 in slurmstepd; tests pass their own uid).
// Throws saker::Error naming the file.
SiteKey read_site_key(const std::string& path, unsigned owner_uid = 0, const KnownPublicKey* known = nullptr);
// Parses PEM text (no file checks). Throws saker::Error naming `where`. `known_pub`: the
// public key of this very seed, when the caller already has it.
SiteKey parse_private_pem(const std::string& pem, const std::string& where,
                          const ed25519::PublicKey* known_pub = nullptr);

struct PublicSiteKey {
  ed25519::PublicKey pub{};
  std::string key_id;
};
PublicSiteKey read_public_key(const std::string& path);  // throws saker::Error naming the file
PublicSiteKey parse_public_pem(const std::string& pem, const std::string& where);

// The key id of a raw public key.
std::string key_id_of(const ed25519::PublicKey& pub);

}  // namespace saker::provenance
