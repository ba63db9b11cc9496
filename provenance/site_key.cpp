#include "provenance/site_key.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string.h>  // explicit_bzero

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "provenance/text.hpp"

namespace saker::provenance {
namespace {

// The DER of an Ed25519 key before its 32 key bytes (RFC 8410): PKCS#8 and SPKI.
const std::string kPrivatePrefix("\x30\x2e\x02\x01\x00\x30\x05\x06\x03\x2b\x65\x70\x04\x22\x04\x20", 16);
const std::string kPublicPrefix("\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00", 12);

// The DER inside one PEM block of `label`; throws naming `where`.
std::string pem_body(const std::string& pem, const std::string& label, const std::string& where) {
  const std::string begin = "-----BEGIN " + label + "-----", end = "-----END " + label + "-----";
  const auto b = pem.find(begin), e = pem.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b)
    throw Error(explain(where, "not a PEM " + label + " block",
                        label == "PRIVATE KEY" ? "make one with: openssl genpkey -algorithm ed25519 -out FILE"
                                               : "write it with: openssl pkey -in PRIVATE_KEY -pubout -out FILE"));
  std::string b64;
  for (std::size_t i = b + begin.size(); i < e; ++i)
    if (pem[i] != '\n' && pem[i] != '\r' && pem[i] != ' ') b64 += pem[i];
  const auto der = base64_decode(b64);
  ::explicit_bzero(b64.data(), b64.size());  // a private key's, possibly
  if (!der) throw Error(explain(where, "the PEM block is not valid base64", "write the file again with openssl"));
  return *der;
}

std::string read_small(int fd, const std::string& path) {
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(explain(path, std::string("cannot read: ") + std::strerror(errno), "check the file"));
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 65536) throw Error(explain(path, "larger than 64 KiB: not a key file", "give the PEM key file"));
  }
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

std::string key_id_of(const ed25519::PublicKey& pub) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(pub.data()), pub.size()));
}

std::string key_binding(const ed25519::Seed& seed, const ed25519::PublicKey& pub) {
  hash::Sha256 h;
  h.update(std::string_view("saker-attest-pub-binding 1\n", 27));
  h.update(std::string_view(reinterpret_cast<const char*>(seed.data()), seed.size()));
  h.update(std::string_view(reinterpret_cast<const char*>(pub.data()), pub.size()));
  const auto digest = h.finish();
  return hex(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

namespace {

// The seed of a PKCS#8 Ed25519 PEM; throws naming `where`.
SiteKey parse_seed(const std::string& pem, const std::string& where) {
  std::string der = pem_body(pem, "PRIVATE KEY", where);
  if (der.size() != kPrivatePrefix.size() + 32 || der.compare(0, kPrivatePrefix.size(), kPrivatePrefix) != 0)
    throw Error(explain(where, "not an Ed25519 private key", "make one with: openssl genpkey -algorithm ed25519 -out FILE"));
  SiteKey k;
  std::memcpy(k.seed.data(), der.data() + kPrivatePrefix.size(), 32);
  ::explicit_bzero(der.data(), der.size());
  return k;
}

void set_public(SiteKey& k, const ed25519::PublicKey* known_pub) {
  k.pub_known = known_pub != nullptr;
  k.pub = k.pub_known ? *known_pub : ed25519::public_of(k.seed);
  k.key_id = key_id_of(k.pub);
}

}  // namespace

SiteKey parse_private_pem(const std::string& pem, const std::string& where, const ed25519::PublicKey* known_pub) {
  SiteKey k = parse_seed(pem, where);
  set_public(k, known_pub);
  return k;
}

SiteKey read_site_key(const std::string& path, unsigned owner_uid, const KnownPublicKey* known) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    throw Error(explain("attestation key " + path, std::string("cannot open: ") + std::strerror(errno),
                        "create it as root: openssl genpkey -algorithm ed25519 -out " + path + " && chmod 600 " + path));
  struct stat st {};
  std::string text;
  try {
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      throw Error(explain("attestation key " + path, "not a regular file", "give the PEM file itself, not a link"));
    if (st.st_uid != owner_uid || (st.st_mode & 077) != 0)
      throw Error(explain("attestation key " + path,
                          "owned by uid " + std::to_string(st.st_uid) + " with mode " + mode_text(st.st_mode) +
                              ": anyone but root who can read it can forge attestations, so it is not used",
                          "chown " + std::to_string(owner_uid) + " " + path + " && chmod 600 " + path +
                              ", and make a new key if others could read it"));
    text = read_small(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const std::string file_id = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                              std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
                              std::to_string(st.st_size);
  SiteKey k = parse_seed(text, "attestation key " + path);
  ::explicit_bzero(text.data(), text.size());
  const bool reuse = known != nullptr && !known->file_id.empty() && known->file_id == file_id &&
                     known->binding == key_binding(k.seed, known->pub);
  set_public(k, reuse ? &known->pub : nullptr);
  k.file_id = file_id;
  return k;
}

PublicSiteKey parse_public_pem(const std::string& pem, const std::string& where) {
  const std::string der = pem_body(pem, "PUBLIC KEY", where);
  if (der.size() != kPublicPrefix.size() + 32 || der.compare(0, kPublicPrefix.size(), kPublicPrefix) != 0)
    throw Error(explain(where, "not an Ed25519 public key", "write it with: openssl pkey -in PRIVATE_KEY -pubout -out FILE"));
  PublicSiteKey k;
  std::memcpy(k.pub.data(), der.data() + kPublicPrefix.size(), 32);
  k.key_id = key_id_of(k.pub);
  return k;
}

PublicSiteKey read_public_key(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(explain("public key " + path, std::string("cannot open: ") + std::strerror(errno),
                        "give the site's attestation public key (PEM)"));
  std::string text;
  try {
    text = read_small(fd, "public key " + path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return parse_public_pem(text, "public key " + path);
}

}  // namespace saker::provenance
