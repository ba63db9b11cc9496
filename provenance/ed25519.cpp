#include "provenance/ed25519.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <string.h>  // explicit_bzero

#include "common/error.hpp"

#if SAKER_ED25519_SODIUM_LINKED
#include <sodium/crypto_sign_ed25519.h>
#endif

namespace saker::provenance::ed25519 {
namespace {

// OpenSSL's C ABI (openssl/evp.h, stable across 1.1.1 and 3.x); opaque pointers only.
using Pkey = void;
using MdCtx = void;
constexpr int kEvpPkeyEd25519 = 1087;  // NID_ED25519

struct Api {
  Pkey* (*new_raw_private)(int, void*, const unsigned char*, std::size_t);
  Pkey* (*new_raw_public)(int, void*, const unsigned char*, std::size_t);
  int (*get_raw_public)(const Pkey*, unsigned char*, std::size_t*);
  void (*pkey_free)(Pkey*);
  MdCtx* (*ctx_new)();
  void (*ctx_free)(MdCtx*);
  int (*sign_init)(MdCtx*, void**, const void*, void*, Pkey*);
  int (*sign)(MdCtx*, unsigned char*, std::size_t*, const unsigned char*, std::size_t);
  int (*verify_init)(MdCtx*, void**, const void*, void*, Pkey*);
  int (*verify)(MdCtx*, const unsigned char*, std::size_t, const unsigned char*, std::size_t);
  std::string problem;  // non-empty: unusable
};

template <typename F>
void bind(void* lib, const char* name, F& slot, std::string& problem) {
  slot = reinterpret_cast<F>(::dlsym(lib, name));
  if (slot == nullptr && problem.empty()) problem = std::string("libcrypto lacks ") + name;
}

Api load() {
  Api a{};
  void* lib = nullptr;
  for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"})
    if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  if (lib == nullptr) {
    const char* why = ::dlerror();
    a.problem = std::string("cannot load OpenSSL's libcrypto: ") + (why ? why : "not found");
    return a;
  }
  bind(lib, "EVP_PKEY_new_raw_private_key", a.new_raw_private, a.problem);
  bind(lib, "EVP_PKEY_new_raw_public_key", a.new_raw_public, a.problem);
  bind(lib, "EVP_PKEY_get_raw_public_key", a.get_raw_public, a.problem);
  bind(lib, "EVP_PKEY_free", a.pkey_free, a.problem);
  bind(lib, "EVP_MD_CTX_new", a.ctx_new, a.problem);
  bind(lib, "EVP_MD_CTX_free", a.ctx_free, a.problem);
  bind(lib, "EVP_DigestSignInit", a.sign_init, a.problem);
  bind(lib, "EVP_DigestSign", a.sign, a.problem);
  bind(lib, "EVP_DigestVerifyInit", a.verify_init, a.problem);
  bind(lib, "EVP_DigestVerify", a.verify, a.problem);
  return a;
}

const Api& api() {
  static const Api a = load();
  if (!a.problem.empty())
    throw Error(explain("Ed25519", a.problem, "install OpenSSL 1.1.1 or later (Debian: libssl3)"));
  return a;
}

// Owns an EVP_PKEY and an EVP_MD_CTX for one operation.
struct Op {
  const Api& a;
  Pkey* key = nullptr;
  MdCtx* ctx = nullptr;
  explicit Op(const Api& api) : a(api) {}
  ~Op() {
    if (ctx) a.ctx_free(ctx);
    if (key) a.pkey_free(key);
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
};

// libsodium's Ed25519 (RFC 8032, deterministic: the same key and message give the same
// signature as OpenSSL's, which the unit test checks). Why a second library: in a fresh
// slurmstepd, loading libcrypto and its first EVP call (provider setup) cost ~1.6 ms per
// node-step here, most of the attestation's launch cost; libsodium (350 KB, no providers)
// loads, initialises and signs in ~0.15 ms. Verification stays with libcrypto (not per step).
struct Sodium {
  int (*init)();
  int (*seed_keypair)(unsigned char*, unsigned char*, const unsigned char*);
  int (*sign_detached)(unsigned char*, unsigned long long*, const unsigned char*, unsigned long long,
                       const unsigned char*);
  bool usable = false;
  const char* name = "libcrypto";
};

#if SAKER_ED25519_SODIUM_LINKED
// spank_saker.so links the two functions it needs from libsodium's static archive
// (plugins/spank/Makefile.inc): dlopen'ing libsodium.so relocated ~190 of its own symbols
// per slurmstepd, as much work as the signature. Neither function needs sodium_init():
// it only picks implementations of other primitives and seeds randombytes, and Ed25519
// signing is deterministic (no randomness) with one implementation in libsodium 1.0.18.
Sodium load_sodium() {
  Sodium s{};
  s.seed_keypair = crypto_sign_ed25519_seed_keypair;
  s.sign_detached = crypto_sign_ed25519_detached;
  s.usable = true;
  s.name = "libsodium (linked in)";
  return s;
}
#else
Sodium load_sodium() {
  Sodium s{};
  void* lib = ::dlopen("libsodium.so.23", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return s;  // not installed: libcrypto signs (slower, same signature)
  std::string problem;
  bind(lib, "sodium_init", s.init, problem);
  bind(lib, "crypto_sign_ed25519_seed_keypair", s.seed_keypair, problem);
  bind(lib, "crypto_sign_ed25519_detached", s.sign_detached, problem);
  s.usable = problem.empty() && s.init() >= 0;  // sodium_init: 0 first time, 1 already done
  if (s.usable) s.name = "libsodium";
  return s;
}
#endif

const Sodium& sodium() {
  static const Sodium s = load_sodium();
  return s;
}

// libsodium's secret key is the seed followed by its public key; wiped after each use.
struct SodiumSecret {
  std::array<unsigned char, 64> sk{};
  PublicKey pub{};
  explicit SodiumSecret(const Seed& seed) {
    if (sodium().seed_keypair(pub.data(), sk.data(), seed.data()) != 0)
      throw Error(explain("Ed25519", "libsodium refused the private key", "make a new one: openssl genpkey -algorithm ed25519"));
  }
  // The public key already derived from this seed (public_of): deriving it is a scalar
  // multiplication, as costly as the signature itself, so a signer that holds it skips that.
  SodiumSecret(const Seed& seed, const PublicKey& known) : pub(known) {
    std::copy(seed.begin(), seed.end(), sk.begin());
    std::copy(known.begin(), known.end(), sk.begin() + 32);
  }
  ~SodiumSecret() { ::explicit_bzero(sk.data(), sk.size()); }
  SodiumSecret(const SodiumSecret&) = delete;
  SodiumSecret& operator=(const SodiumSecret&) = delete;
};

}  // namespace

const char* signing_library() { return sodium().name; }

PublicKey public_of(const Seed& seed) {
  if (sodium().usable) return SodiumSecret(seed).pub;
  return public_of_libcrypto(seed);
}

namespace {

Signature sign_sodium(const SodiumSecret& secret, std::string_view message) {
  Signature sig{};
  unsigned long long len = 0;
  if (sodium().sign_detached(sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                             secret.sk.data()) != 0 ||
      len != sig.size())
    throw Error(explain("Ed25519", "libsodium could not sign", "check the key with: openssl pkey -in KEY -noout"));
  return sig;
}

}  // namespace

Signature sign(const Seed& seed, std::string_view message) {
  if (!sodium().usable) return sign_libcrypto(seed, message);
  return sign_sodium(SodiumSecret(seed), message);
}

Signature sign(const Seed& seed, const PublicKey& pub, std::string_view message) {
  if (!sodium().usable) return sign_libcrypto(seed, message);
  return sign_sodium(SodiumSecret(seed, pub), message);
}

PublicKey public_of_libcrypto(const Seed& seed) {
  Op op(api());
  op.key = op.a.new_raw_private(kEvpPkeyEd25519, nullptr, seed.data(), seed.size());
  PublicKey pub{};
  std::size_t len = pub.size();
  if (op.key == nullptr || op.a.get_raw_public(op.key, pub.data(), &len) != 1 || len != pub.size())
    throw Error(explain("Ed25519", "libcrypto refused the private key", "make a new one: openssl genpkey -algorithm ed25519"));
  return pub;
}

Signature sign_libcrypto(const Seed& seed, std::string_view message) {
  Op op(api());
  op.key = op.a.new_raw_private(kEvpPkeyEd25519, nullptr, seed.data(), seed.size());
  op.ctx = op.a.ctx_new();
  Signature sig{};
  std::size_t len = sig.size();
  if (op.key == nullptr || op.ctx == nullptr || op.a.sign_init(op.ctx, nullptr, nullptr, nullptr, op.key) != 1 ||
      op.a.sign(op.ctx, sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1 ||
      len != sig.size())
    throw Error(explain("Ed25519", "libcrypto could not sign", "check the key with: openssl pkey -in KEY -noout"));
  return sig;
}

bool verify(const PublicKey& key, std::string_view message, const Signature& signature) {
  Op op(api());
  op.key = op.a.new_raw_public(kEvpPkeyEd25519, nullptr, key.data(), key.size());
  op.ctx = op.a.ctx_new();
  if (op.key == nullptr || op.ctx == nullptr || op.a.verify_init(op.ctx, nullptr, nullptr, nullptr, op.key) != 1)
    throw Error(explain("Ed25519", "libcrypto refused the public key", "give the site's public key in PEM"));
  return op.a.verify(op.ctx, signature.data(), signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) == 1;
}

}  // namespace saker::provenance::ed25519
