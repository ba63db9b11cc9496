#include "ckpt/provenance.hpp"

#include "ckpt/manifest.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/log.hpp"
#include "provenance/attestation.hpp"
#include "provenance/text.hpp"

namespace saker::ckpt::provenance {

using manifest::escape;
using manifest::unescape;
namespace fs = std::filesystem;
namespace pv = saker::provenance;

namespace {

constexpr const char* kHead = "saker-provenance 1";

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  throw Error(explain(where, "provenance record: " + why, "the checkpoint is damaged or its provenance was edited"));
}


std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> f;
  std::size_t a = 0;
  while (a <= line.size()) {
    const auto b = line.find(' ', a);
    f.push_back(line.substr(a, b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return f;
}

bool is_sha256(const std::string& s) { return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos; }

std::atomic<bool> omitted{false};

}  // namespace

void set_omitted_for_benchmark(bool omit) { omitted.store(omit); }
bool omitted_for_benchmark() { return omitted.load(); }

std::string encode(const Record& r) {
  std::string o = std::string(kHead) + "\n";
  o += "job " + escape(r.job_id) + " " + escape(r.step_id) + "\n";
  o += "attestation " + escape(r.attestation) + " " + escape(r.attestation_note) + "\n";
  for (const auto& d : r.enforced) o += "enforced " + escape(d) + "\n";
  o += "code " + escape(r.code.path) + " " + escape(r.code.sha256) + " " + escape(r.code.git_commit) + " " + escape(r.code.interpreter) + "\n";
  for (const auto& p : r.parents) o += "parent " + p.sha256 + " " + escape(p.run_id) + " " + std::to_string(p.step) + " " + escape(p.file) + "\n";
  o += "end\n";
  return o;
}

Record decode(const std::string& text, const std::string& where) {
  std::vector<std::vector<std::string>> lines;
  std::size_t from = 0;
  while (from < text.size()) {
    const auto nl = text.find('\n', from);
    if (nl == std::string::npos) bad(where, "no newline at the end");
    lines.push_back(split(text.substr(from, nl - from)));
    from = nl + 1;
  }
  if (lines.size() < 4 || lines[0].size() != 2 || lines[0][0] + " " + lines[0][1] != kHead) bad(where, "not a provenance record");
  Record r;
  std::size_t i = 1;
  auto expect = [&](const char* key, std::size_t fields) {
    if (i >= lines.size() || lines[i][0] != key || lines[i].size() != fields)
      bad(where, std::string("expected a '") + key + "' line of " + std::to_string(fields) + " fields at line " + std::to_string(i + 1));
    return lines[i++];
  };
  auto f = expect("job", 3);
  r.job_id = unescape(f[1], where), r.step_id = unescape(f[2], where);
  f = expect("attestation", 3);
  r.attestation = unescape(f[1], where), r.attestation_note = unescape(f[2], where);
  while (i < lines.size() && lines[i][0] == "enforced") r.enforced.push_back(unescape(expect("enforced", 2)[1], where));
  f = expect("code", 5);
  r.code = {unescape(f[1], where), unescape(f[2], where), unescape(f[3], where), unescape(f[4], where)};
  while (i < lines.size() && lines[i][0] == "parent") {
    f = expect("parent", 5);
    if (!is_sha256(f[1])) bad(where, "a parent digest is not 64 hex digits");
    if (f[3].empty() || f[3].size() > 19 || f[3].find_first_not_of("0123456789") != std::string::npos) bad(where, "a parent's step is not a number");
    r.parents.push_back({f[1], unescape(f[2], where), std::stoull(f[3]), unescape(f[4], where)});
  }
  expect("end", 1);
  if (i != lines.size()) bad(where, "lines after 'end'");
  return r;
}

std::string file_sha256(const fs::path& file, bool drop_behind) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(explain(file.string(), std::string("cannot open: ") + std::strerror(errno), "check the path"));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  bool ok = ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = ok && n == 0;
      break;
    }
    ok = ok && EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n)) == 1;
    if (drop_behind) ::posix_fadvise(fd, at, n, POSIX_FADV_DONTNEED);
    at += n;
  }
  const int err = errno;
  ::close(fd);
  unsigned char md[32];
  unsigned len = 0;
  if (!ok || EVP_DigestFinal_ex(ctx.get(), md, &len) != 1 || len != 32)
    throw Error(explain(file.string(), std::string("cannot hash: ") + std::strerror(err), "check the file"));
  return pv::hex(std::string_view(reinterpret_cast<const char*>(md), 32));
}

Record collect(const std::vector<Parent>& loaded) {
  Record r;
  if (const char* v = std::getenv("SLURM_JOB_ID")) r.job_id = v;
  if (const char* v = std::getenv("SLURM_STEP_ID")) r.step_id = v;
  const char* att = std::getenv("SAKER_ATTESTATION");
  if (att == nullptr || *att == '\0') {
    r.attestation_note = "no SAKER_ATTESTATION: not run in a Slurm step whose spank_saker.so has attest-key=";
  } else if (const auto text = file::read(att); !text) {
    r.attestation_note = std::string("cannot read SAKER_ATTESTATION ") + att + ": " + std::strerror(errno);
  } else {
    try {
      // Not verified here (the job holds no key): copied, and checked by saker-ckpt provenance --verify.
      const pv::Envelope e = pv::parse_envelope(*text, att);
      for (const auto& d : pv::parse_payload(e.payload, att).datasets) r.enforced.push_back(d.ref());
      r.attestation = *text;
    } catch (const std::exception& e) {
      r.attestation_note = e.what();
    }
  }
  if (!r.attestation_note.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] { log::info("ckpt: checkpoints carry no job attestation: " + r.attestation_note); });
  }
  r.code = code_identity();
  r.parents = loaded;
  if (const char* v = std::getenv("SAKER_CKPT_PARENTS")) {
    // A sweep trial's lineage: digests (sha256:HEX or HEX) the launcher knows, comma-separated.
    std::string list = v;
    for (std::size_t a = 0; a < list.size();) {
      auto b = list.find(',', a);
      if (b == std::string::npos) b = list.size();
      std::string d = list.substr(a, b - a);
      if (d.rfind("sha256:", 0) == 0) d = d.substr(7);
      const bool known = std::any_of(r.parents.begin(), r.parents.end(), [&](const Parent& p) { return p.sha256 == d; });
      if (!is_sha256(d)) log::warn("ckpt: SAKER_CKPT_PARENTS: '" + d + "' is not a SHA-256 digest; ignored");
      else if (!known) r.parents.push_back({d, "", 0, "SAKER_CKPT_PARENTS"});  // one the program loaded is named once
      a = b + 1;
    }
  }
  return r;
}

}  // namespace saker::ckpt::provenance
