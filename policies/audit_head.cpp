#include "policies/audit_head.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace saker::policy::audit {

namespace {

constexpr std::size_t kMaxHeadBytes = 512;

std::string mac_input(const Head& h) {
  return "saker-audit-head v1\n" + std::to_string(h.last_id) + "\n" + h.last_hash + "\n" + std::to_string(h.log_bytes);
}

// The unsigned number after "key": in line, or nullopt.
std::optional<std::uint64_t> number_field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const std::size_t at = line.find(tag);
  if (at == std::string::npos) return std::nullopt;
  std::size_t i = at + tag.size();
  if (i >= line.size() || line[i] < '0' || line[i] > '9') return std::nullopt;
  std::uint64_t v = 0;
  for (int digits = 0; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i, ++digits) {
    if (digits == 19) return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(line[i] - '0');
  }
  return v;
}

std::optional<std::string> string_field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\":\"";
  const std::size_t at = line.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const std::size_t end = line.find('"', at + tag.size());
  if (end == std::string::npos) return std::nullopt;
  return line.substr(at + tag.size(), end - at - tag.size());
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string head_path(const std::string& log_path) { return log_path + ".head"; }

std::string head_line(const Head& h, const std::string& key) {
  std::string line = "{\"last_id\":" + std::to_string(h.last_id) + ",\"last_hash\":\"" + h.last_hash +
                     "\",\"log_bytes\":" + std::to_string(h.log_bytes);
  if (!key.empty()) line += ",\"mac\":\"" + hash::hmac_sha256_hex(key, mac_input(h)) + "\"";
  return line + "}\n";
}

std::string write_head(const std::string& log_path, const Head& head, const std::string& key) {
  const std::string path = head_path(log_path);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return "cannot write the audit head " + tmp + ": " + std::strerror(errno);
  const bool ok = write_all(fd, head_line(head, key)) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : saved);
    ::unlink(tmp.c_str());
    return "cannot replace the audit head " + path + ": " + why;
  }
  return {};
}

namespace {

// At most `max` bytes, with open/read rather than an ifstream: every step's attestation
// states the node's head (spank_saker.so, in a fresh slurmstepd), where the first iostream
// builds the C++ locale (common/file.hpp). nullopt with errno set when it cannot be read.
std::optional<std::string> read_at_most(const std::string& path, std::size_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out(max, '\0');
  std::size_t got = 0;
  while (got < max) {
    const ssize_t n = ::read(fd, out.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace

std::optional<Head> read_head(const std::string& log_path, const std::string& key, std::string& problem) {
  const std::string path = head_path(log_path);
  auto text = read_at_most(path, kMaxHeadBytes + 1);
  if (!text) {
    problem = "no sealed head " + path + " (" + std::strerror(errno) +
              "): a deleted tail of the log cannot be ruled out";
    return std::nullopt;
  }
  std::string line = std::move(*text);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  Head h;
  const auto id = number_field(line, "last_id");
  const auto hash = string_field(line, "last_hash");
  const auto bytes = number_field(line, "log_bytes");
  if (line.size() > kMaxHeadBytes || !id || !hash || hash->size() != 64 || !bytes) {
    problem = "the sealed head " + path + " is malformed (edited or cut)";
    return std::nullopt;
  }
  h.last_id = *id;
  h.last_hash = *hash;
  h.log_bytes = *bytes;
  if (line + "\n" != head_line(h, key)) {
    const auto mac = string_field(line, "mac");
    if (key.empty() && mac) problem = "the sealed head " + path + " carries a MAC: verify with the key (--key FILE)";
    else if (!key.empty() && !mac) problem = "the sealed head " + path + " carries no MAC although a key was given";
    else if (mac) problem = "the sealed head " + path + " does not match its MAC: it was forged, or the key is wrong";
    else problem = "the sealed head " + path + " is malformed (edited)";
    return std::nullopt;
  }
  return h;
}

std::string read_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(explain("cannot read the audit key " + path, std::strerror(errno),
                               "point audit_key= (or --key) at a file readable by SlurmUser"));
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().size() < 16)
    throw Error(explain("the audit key " + path + " is too short", "it has " + std::to_string(s.str().size()) +
                        " bytes", "write at least 32 random bytes: head -c 32 /dev/urandom > " + path));
  return s.str();
}

}  // namespace saker::policy::audit
