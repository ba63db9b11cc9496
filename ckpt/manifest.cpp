#include "ckpt/manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "ckpt/load.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"

namespace saker::ckpt::manifest {
namespace fs = std::filesystem;

namespace {

// "saker-ckpt\0vN\0\0\0": byte 12 is the format version, '3' written, '2' still read.
constexpr char kMagic[16] = {'s', 'a', 'k', 'e', 'r', '-', 'c', 'k', 'p', 't', '\0', 'v', '3', '\0', '\0', '\0'};
constexpr std::size_t kVersionByte = 12;
// Header bytes 48..79: the manifest's GCM tag, its nonce, and 4 unused bytes.
constexpr std::size_t kSealedFrom = 48, kNonceAt = 64, kUnusedFrom = 76;

// The header checksum (bytes 32..47). Format 3: XXH3-128 of header bytes 48..79 followed by
// the manifest, so a keyless check sees a changed tag or nonce. Format 2 (every release
// before): of the manifest alone.
std::string header_checksum(std::uint64_t version, const unsigned char* head, const std::string& text) {
  if (version == 2) return hash::xxh3_128(text.data(), text.size()).hex();
  std::string covered(reinterpret_cast<const char*>(head + kSealedFrom), kHeaderBytes - kSealedFrom);
  covered += text;
  return hash::xxh3_128(covered.data(), covered.size()).hex();
}
constexpr std::size_t kPiece = std::size_t{1} << 20;

[[noreturn]] void damaged(const std::string& where, const std::string& why) {
  throw Error(explain(where, why, "this checkpoint is damaged; load an older one (saker-ckpt verify lists the intact ones)"));
}


std::string join(const std::vector<std::uint64_t>& v) {
  if (v.empty()) return "-";
  std::string out;
  for (std::uint64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::uint64_t number(const std::string& s, const std::string& where) {
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos)
    damaged(where, "bad number '" + s.substr(0, 40) + "' in the manifest");
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) damaged(where, "number out of range in the manifest");
  return v;
}

std::vector<std::uint64_t> numbers(const std::string& s, const std::string& where) {
  std::vector<std::uint64_t> out;
  if (s == "-") return out;
  std::size_t from = 0;
  for (;;) {
    const std::size_t comma = s.find(',', from);
    out.push_back(number(s.substr(from, comma - from), where));
    if (out.size() > 32) damaged(where, "a shape with more than 32 dimensions");
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

std::string entry_line(const char* kind, const Entry& e) {
  std::ostringstream o;
  o << kind << ' ' << escape(e.name) << ' ' << dtype_name(e.dtype) << ' ' << join(e.shape) << ' '
    << (e.placement == Placement::replicated ? "replicated" : "partitioned") << ' ' << join(e.global_shape) << ' '
    << e.first_row << ' ' << e.file_offset << ' ' << e.bytes << ' ' << e.xxh3 << ' ' << (e.encrypted ? 1 : 0) << ' '
    << (e.nonce.empty() ? "-" : e.nonce) << ' ' << (e.tag.empty() ? "-" : e.tag) << '\n';
  return o.str();
}

bool is_hex(const std::string& s, std::size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Entry parse_entry(const std::vector<std::string>& f, const std::string& where) {
  if (f.size() != 13) damaged(where, "a " + f[0] + " line of the manifest has " + std::to_string(f.size()) + " fields, not 13");
  Entry e;
  e.name = unescape(f[1], where);
  try {
    e.dtype = dtype_from_name(f[2]);
  } catch (const Error&) {
    damaged(where, "unknown dtype in the manifest");
  }
  e.shape = numbers(f[3], where);
  if (f[4] != "replicated" && f[4] != "partitioned") damaged(where, "unknown placement in the manifest");
  e.placement = f[4] == "replicated" ? Placement::replicated : Placement::partitioned;
  e.global_shape = numbers(f[5], where);
  e.first_row = number(f[6], where);
  e.file_offset = number(f[7], where);
  e.bytes = number(f[8], where);
  e.xxh3 = f[9];
  if (!is_hex(e.xxh3, 32)) damaged(where, "bad checksum of " + e.name + " in the manifest");
  if (f[10] != "0" && f[10] != "1") damaged(where, "bad encryption flag of " + e.name);
  e.encrypted = f[10] == "1";
  if (e.encrypted) {
    e.nonce = f[11];
    e.tag = f[12];
    if (!is_hex(e.nonce, 2 * crypto::kNonceSize) || !is_hex(e.tag, 2 * crypto::kTagSize))
      damaged(where, "bad nonce or tag of " + e.name + " in the manifest");
  } else if (f[11] != "-" || f[12] != "-") {
    damaged(where, "a plaintext entry with a nonce or tag in the manifest");
  }
  return e;
}

// ---------------------------------------------------------------- file helpers

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pread_all(int fd, void* dst, std::size_t size, std::uint64_t at, const std::string& where) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + got, size - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) damaged(where, std::string("read error: ") + std::strerror(errno));
    if (r == 0) damaged(where, "the file is truncated");
    got += static_cast<std::size_t>(r);
  }
}

std::uint64_t u64_at(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The data regions, sorted; each must lie inside [user_block, size) without overlaps.
std::vector<std::pair<std::uint64_t, std::uint64_t>> regions_of(const Manifest& m, const std::string& where) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> r;
  auto add = [&](const Entry& e) {
    if (e.bytes == 0) return;
    if (e.file_offset < m.user_block || e.file_offset > m.file_size || e.bytes > m.file_size - e.file_offset)
      damaged(where, "the bytes of " + e.name + " lie outside the file");
    r.emplace_back(e.file_offset, e.bytes);
  };
  for (const Entry& e : m.tensors) add(e);
  add(m.rng_state);
  add(m.data_cursor);
  std::sort(r.begin(), r.end());
  for (std::size_t i = 1; i < r.size(); ++i)
    if (r[i - 1].first + r[i - 1].second > r[i].first) damaged(where, "two data regions overlap");
  return r;
}

// XXH3-128 of [user_block, file_size) without the data regions.
std::string meta_hash(int fd, const Manifest& m, const std::string& where) {
  const auto regions = regions_of(m, where);
  hash::Xxh3Stream h;
  std::vector<unsigned char> buf(kPiece);
  std::uint64_t at = m.user_block;
  auto hash_until = [&](std::uint64_t end) {
    while (at < end) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, end - at));
      pread_all(fd, buf.data(), n, at, where);
      h.update(buf.data(), n);
      at += n;
    }
  };
  for (const auto& [off, len] : regions) {
    hash_until(off);
    at = off + len;
  }
  hash_until(m.file_size);
  return h.digest().hex();
}

std::string manifest_aad(const std::string& text) { return "saker-ckpt/2/manifest\n" + text; }

}  // namespace

// ---------------------------------------------------------------- text encoding

std::string escape(const std::string& s) {
  if (s.empty()) return "%";  // an empty field must still be one token
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c > 0x20 && c < 0x7f && c != '%') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string unescape(const std::string& s, const std::string& where) {
  if (s == "%") return {};
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) damaged(where, "bad escape in the manifest");
    const int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
    if (hi < 0 || lo < 0) damaged(where, "bad escape in the manifest");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// ---------------------------------------------------------------- encoding

std::string encode(const Manifest& m) {
  std::ostringstream o;
  o << "saker-ckpt-manifest " << m.format_version << '\n'
    << "run_id " << escape(m.run_id) << '\n'
    << "step " << m.step << '\n'
    << "epoch " << m.epoch << '\n'
    << "world_size " << m.world_size << '\n'
    << "rank " << m.rank << '\n'
    << "created_unix " << m.created_unix << '\n'
    << "saker_version " << escape(m.saker_version) << '\n'
    << "config " << escape(m.config) << '\n'
    << "lineage " << escape(m.lineage) << '\n'
    << "encryption " << escape(m.encryption) << '\n'
    << "key_id " << escape(m.key_id) << '\n'
    << "user_block " << m.user_block << '\n'
    << "file_size " << m.file_size << '\n'
    << "meta_xxh3 " << m.meta_xxh3 << '\n';
  if (!m.provenance.empty()) o << "provenance " << escape(m.provenance) << '\n';
  for (const Entry& e : m.tensors) o << entry_line("tensor", e);
  o << entry_line("blob", m.rng_state) << entry_line("blob", m.data_cursor);
  for (const ShardRef& s : m.shards) o << "shard " << s.rank << ' ' << escape(s.file) << ' ' << s.manifest_xxh3 << '\n';
  o << "end\n";
  return o.str();
}

Manifest decode(const std::string& text, const std::string& where) {
  Manifest m;
  std::vector<std::vector<std::string>> lines;
  std::size_t from = 0;
  while (from < text.size()) {
    std::size_t nl = text.find('\n', from);
    if (nl == std::string::npos) damaged(where, "the manifest does not end with a newline");
    std::vector<std::string> fields;
    std::size_t a = from;
    while (a < nl) {
      std::size_t b = text.find(' ', a);
      if (b == std::string::npos || b > nl) b = nl;
      fields.push_back(text.substr(a, b - a));
      a = b + 1;
    }
    if (fields.empty()) damaged(where, "an empty line in the manifest");
    lines.push_back(std::move(fields));
    from = nl + 1;
  }
  // Fixed header lines, in order: nothing may be missing, repeated or unknown.
  static const char* kHead[] = {"saker-ckpt-manifest", "run_id", "step", "epoch", "world_size", "rank", "created_unix",
                                "saker_version", "config", "lineage", "encryption", "key_id", "user_block", "file_size",
                                "meta_xxh3"};
  constexpr std::size_t kHeadLines = sizeof kHead / sizeof kHead[0];
  if (lines.size() < kHeadLines + 3) damaged(where, "the manifest is incomplete");
  for (std::size_t i = 0; i < kHeadLines; ++i)
    if (lines[i].size() != 2 || lines[i][0] != kHead[i]) damaged(where, std::string("manifest line ") + kHead[i] + " is malformed");
  auto v = [&](std::size_t i) -> const std::string& { return lines[i][1]; };
  m.format_version = number(v(0), where);
  if (m.format_version != kFormatVersion && m.format_version != 2)
    damaged(where, "manifest format " + v(0) + " is neither " + std::to_string(kFormatVersion) + " nor 2");
  m.run_id = unescape(v(1), where);
  m.step = number(v(2), where);
  m.epoch = number(v(3), where);
  const std::uint64_t world = number(v(4), where), rank = number(v(5), where);
  if (world == 0 || world > (1u << 20) || rank >= world) damaged(where, "bad world_size or rank in the manifest");
  m.world_size = static_cast<std::uint32_t>(world);
  m.rank = static_cast<std::uint32_t>(rank);
  const std::string created = v(6);
  m.created_unix = static_cast<std::int64_t>(number(created, where));
  m.saker_version = unescape(v(7), where);
  m.config = unescape(v(8), where);
  m.lineage = unescape(v(9), where);
  m.encryption = unescape(v(10), where);
  m.key_id = unescape(v(11), where);
  m.user_block = number(v(12), where);
  m.file_size = number(v(13), where);
  m.meta_xxh3 = v(14);
  if (!is_hex(m.meta_xxh3, 32)) damaged(where, "bad meta_xxh3 in the manifest");
  if (m.encryption != "none" && m.encryption != crypto::kCipherName) damaged(where, "unknown encryption '" + m.encryption + "'");
  std::size_t i = kHeadLines;
  if (lines[i][0] == "provenance") {
    if (lines[i].size() != 2 || lines[i][1] == "%") damaged(where, "manifest line provenance is malformed");
    m.provenance = unescape(lines[i++][1], where);
  }
  for (; i < lines.size() && lines[i][0] == "tensor"; ++i) m.tensors.push_back(parse_entry(lines[i], where));
  if (i + 2 >= lines.size() || lines[i][0] != "blob" || lines[i + 1][0] != "blob") damaged(where, "the manifest lacks the blob lines");
  m.rng_state = parse_entry(lines[i], where);
  m.data_cursor = parse_entry(lines[i + 1], where);
  if (m.rng_state.name != "rng_state" || m.data_cursor.name != "data_cursor") damaged(where, "unknown blob in the manifest");
  for (i += 2; i < lines.size() && lines[i][0] == "shard"; ++i) {
    const auto& f = lines[i];
    if (f.size() != 4 || !is_hex(f[3], 32)) damaged(where, "a malformed shard line in the manifest");
    m.shards.push_back({static_cast<std::uint32_t>(std::min<std::uint64_t>(number(f[1], where), 1u << 21)),
                        unescape(f[2], where), f[3]});
  }
  if (i + 1 != lines.size() || lines[i].size() != 1 || lines[i][0] != "end") damaged(where, "the manifest does not end with 'end'");
  return m;
}

std::uint64_t user_block_for(std::uint64_t estimate) {
  std::uint64_t u = kMinUserBlock;
  while (u < estimate + kHeaderBytes && u < kMaxUserBlock) u *= 2;
  return u;
}

std::uint64_t estimate(const Manifest& m, std::size_t shard_refs) {
  std::uint64_t n = 1024 + 3 * (m.run_id.size() + m.config.size() + m.lineage.size() + m.saker_version.size() + m.key_id.size() +
                               m.provenance.size());
  for (const Entry& e : m.tensors) n += 3 * e.name.size() + 200 + 42 * (e.shape.size() + e.global_shape.size());
  n += 2 * 200 + shard_refs * (120 + 2 * 64);
  return n;
}

std::string tensor_aad(const std::string& run_id, std::uint64_t step, std::uint32_t shard, const std::string& name) {
  return "saker-ckpt/2\n" + run_id + "\n" + std::to_string(step) + "\n" + std::to_string(shard) + "\n" + name;
}

std::string seal(const fs::path& file, Manifest& m, const crypto::Key* key) {
  const std::string where = file.string();
  Fd f{::open(file.c_str(), O_RDWR | O_CLOEXEC)};
  if (f.fd < 0) throw Error(explain("cannot open " + where, std::strerror(errno), "check the directory"));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) throw Error(explain("cannot stat " + where, std::strerror(errno), "check the directory"));
  m.file_size = static_cast<std::uint64_t>(st.st_size);
  m.meta_xxh3 = meta_hash(f.fd, m, where);
  const std::string text = encode(m);
  if (kHeaderBytes + text.size() > m.user_block)
    throw Error(explain("the manifest of " + where + " needs " + std::to_string(text.size()) + " bytes",
                        "the user block reserved for it holds " + std::to_string(m.user_block - kHeaderBytes),
                        "report this as a bug (the estimate is too small)"));
  std::vector<unsigned char> block(kHeaderBytes + text.size(), 0);
  std::memcpy(block.data(), kMagic, sizeof kMagic);
  put_u64(&block[16], m.user_block);
  put_u64(&block[24], text.size());
  if (key != nullptr) {
    const crypto::Sealed mac = crypto::seal(*key, {}, manifest_aad(text));
    std::copy(mac.tag.begin(), mac.tag.end(), &block[kSealedFrom]);
    std::copy(mac.nonce.begin(), mac.nonce.end(), &block[kNonceAt]);
  }
  const std::string dh = header_checksum(m.format_version, block.data(), text);
  const auto raw = crypto::from_hex(dh, "manifest checksum");
  std::copy(raw.begin(), raw.end(), &block[32]);
  std::memcpy(&block[kHeaderBytes], text.data(), text.size());
  std::size_t put = 0;
  while (put < block.size()) {
    const ssize_t w = ::pwrite(f.fd, block.data() + put, block.size() - put, static_cast<off_t>(put));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(explain("cannot write the manifest of " + where, std::strerror(errno), "check free space"));
    put += static_cast<std::size_t>(w);
  }
  return dh;
}

Opened open_checked(const fs::path& file) {
  const std::string where = file.string();
  Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) damaged(where, std::string("cannot open it: ") + std::strerror(errno));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) damaged(where, "not a regular file");
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeaderBytes) damaged(where, "the file is truncated (" + std::to_string(size) + " bytes, shorter than the header)");
  unsigned char head[kHeaderBytes];
  pread_all(f.fd, head, kHeaderBytes, 0, where);
  const unsigned char version_char = head[kVersionByte];
  unsigned char expect[sizeof kMagic];
  std::memcpy(expect, kMagic, sizeof kMagic);
  expect[kVersionByte] = version_char;
  if ((version_char != '3' && version_char != '2') || std::memcmp(head, expect, sizeof kMagic) != 0)
    damaged(where, "no Saker format-2 or -3 manifest at the start of the file: not a Saker checkpoint, or a format-1 file "
                   "(Saker 0.1.0 and older), which this release refuses");
  const std::uint64_t ub = u64_at(head + 16), len = u64_at(head + 24);
  if (ub < kMinUserBlock || ub > kMaxUserBlock || (ub & (ub - 1)) != 0) damaged(where, "bad user block size in the header");
  if (len > ub - kHeaderBytes) damaged(where, "bad manifest length in the header");
  if (ub > size) damaged(where, "the file is truncated (shorter than its user block)");
  Opened o;
  std::string text(static_cast<std::size_t>(len), '\0');
  pread_all(f.fd, text.data(), text.size(), kHeaderBytes, where);
  const std::uint64_t version = version_char == '3' ? 3 : 2;
  const std::string got = header_checksum(version, head, text);
  o.manifest_xxh3 = hash::to_hex(head + 32, 16);
  if (got != o.manifest_xxh3) damaged(where, "the manifest's checksum does not match (the manifest was changed or damaged)");
  // The rest of the user block is padding that nobody reads; it must be zeros, so that
  // no byte of the file can change unnoticed.
  {
    std::vector<unsigned char> pad(static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, ub)));
    for (std::uint64_t at = kHeaderBytes + len; at < ub;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(pad.size(), ub - at));
      pread_all(f.fd, pad.data(), n, at, where);
      if (std::any_of(pad.begin(), pad.begin() + static_cast<std::ptrdiff_t>(n), [](unsigned char c) { return c != 0; }))
        damaged(where, "the padding after the manifest is not zero (the user block was changed)");
      at += n;
    }
  }
  std::copy(head + kSealedFrom, head + kNonceAt, o.tag.begin());
  std::copy(head + kNonceAt, head + kUnusedFrom, o.nonce.begin());
  o.manifest = decode(text, where);
  const Manifest& m = o.manifest;
  if (m.format_version != version)
    damaged(where, "the header says format " + std::to_string(version) + ", the manifest format " +
                       std::to_string(m.format_version));
  // Unused header bytes are zeros (every release wrote zeros there, format 2 included):
  // bytes 76..79 always, and the tag and nonce of a plaintext checkpoint.
  const std::size_t zero_from = m.encryption == "none" ? kSealedFrom : kUnusedFrom;
  if (std::any_of(head + zero_from, head + kHeaderBytes, [](unsigned char c) { return c != 0; }))
    damaged(where, std::string("header bytes ") + std::to_string(zero_from) + "..79 are not zero" +
                       (m.encryption == "none" ? " (a plaintext checkpoint has no tag or nonce)" : " (unused bytes)"));
  if (m.user_block != ub) damaged(where, "the manifest and the header disagree on the user block size");
  if (m.file_size != size)
    damaged(where, "the file has " + std::to_string(size) + " bytes, its manifest says " + std::to_string(m.file_size) +
                       (size < m.file_size ? " (truncated)" : " (extended)"));
  if (meta_hash(f.fd, m, where) != m.meta_xxh3)
    damaged(where, "its HDF5 metadata does not match the manifest's checksum (changed or damaged after it was written)");
  // Integrity of the AAD, nonce and tag is not enough: the tag itself authenticates
  // (authenticate()); here only consistency.
  for (const Entry& e : m.tensors)
    if (e.encrypted != (m.encryption != "none"))
      damaged(where, "tensor " + e.name + " is " + (e.encrypted ? "encrypted" : "plaintext") + " in a checkpoint marked " + m.encryption);
  o.text = std::move(text);  // what the tag covers
  return o;
}

void authenticate(const Opened& o, const crypto::Key& key, const std::string& where) {
  const Manifest& m = o.manifest;
  if (m.encryption == "none")
    damaged(where, "is not encrypted, but this run is (a key was given): an encrypted run refuses plaintext checkpoints");
  if (m.key_id != key.id)
    throw KeyError(explain(where + " was encrypted with another key", "the file's key id is " + m.key_id +
                                                                         ", the given key's id is " + key.id,
                           "pass the key this checkpoint was written with"));
  unsigned char dummy[1];
  try {
    crypto::open(key, {}, o.nonce.data(), o.tag.data(), manifest_aad(o.text), {reinterpret_cast<std::byte*>(dummy), 0}, where);
  } catch (const Error&) {
    damaged(where, "the manifest's authentication tag does not match this key (tampered manifest)");
  }
}

}  // namespace saker::ckpt::manifest
