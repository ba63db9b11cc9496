// Ed25519 signatures through OpenSSL's EVP interface (or libsodium's, for signing), loaded
// with dlopen on first use.
//
// Why dlopen and not a link: spank_saker.so signs inside slurmstepd, which Slurm starts
// afresh for every step on every node. Linking libcrypto would load and relocate it in
// every slurmstepd of every site, also where no attestation key is configured; that was
// most of the plugin's step-launch cost once (common/sha256.hpp). Loaded on demand, only
// a step that signs pays for it. Programs that already link libcrypto get the same copy.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace saker::provenance::ed25519 {

using Seed = std::array<unsigned char, 32>;       // the private key (RFC 8032 seed)
using PublicKey = std::array<unsigned char, 32>;
using Signature = std::array<unsigned char, 64>;

// Each throws saker::Error when libcrypto cannot be loaded or refuses the key. public_of
// and sign use libsodium instead when it is installed (ed25519.cpp says why): Ed25519 is
// deterministic, so the key and the signature are the same bytes either way.
PublicKey public_of(const Seed& seed);
Signature sign(const Seed& seed, std::string_view message);
// The same signature from a seed and the public key public_of gave for it, without
// deriving it again. Pass only that key: a mismatched pair signs garbage, and signatures of
// one message under two public keys would give the private key away (the "double public
// key" oracle); site_key.hpp's KnownPublicKey comes from root's own note of this key file.
Signature sign(const Seed& seed, const PublicKey& pub, std::string_view message);
bool verify(const PublicKey& key, std::string_view message, const Signature& signature);

// Which library public_of and sign use here: "libsodium (linked in)" (spank_saker.so
// built with libsodium's static archive), "libsodium" (loaded) or "libcrypto".
const char* signing_library();
// Always through libcrypto: the fallback, and the unit test's reference.
PublicKey public_of_libcrypto(const Seed& seed);
Signature sign_libcrypto(const Seed& seed, std::string_view message);

}  // namespace saker::provenance::ed25519
