// The job key and the handshake (see auth.hpp for the protocol and what it binds).
#include "launcher/comm/auth.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/log.hpp"

namespace saker::comm::auth {
namespace {

using Bytes32 = std::array<unsigned char, 32>;
constexpr std::uint32_t kMagic = 0x31414b53;  // "SKA1"
constexpr std::uint8_t kVersion = 1;

Bytes32 hmac(const unsigned char* key, std::size_t key_len, const std::string& data) {
  Bytes32 out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key, static_cast<int>(key_len), reinterpret_cast<const unsigned char*>(data.data()),
            data.size(), out.data(), &len) || len != out.size())
    throw Error("saker: HMAC-SHA256 failed in OpenSSL libcrypto");
  return out;
}

// HKDF-SHA256 (RFC 5869) with a 32-byte output: one expand block.
Bytes32 hkdf(const JobKey& key, const std::string& salt, const std::string& info) {
  Bytes32 prk = hmac(reinterpret_cast<const unsigned char*>(salt.data()), salt.size(),
                     std::string(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size()));
  return hmac(prk.data(), prk.size(), info + '\x01');
}

void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
void append_u32(std::string& s, std::uint32_t v) {
  unsigned char b[4];
  put_u32(b, v);
  s.append(reinterpret_cast<char*>(b), 4);
}
std::string str(const unsigned char* p, std::size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// Everything both MACs and the link keys bind.
std::string transcript(const Context& ctx, const Claim& c, const Bytes32& nonce_c, const Bytes32& nonce_s) {
  std::string t = "saker-auth v1";
  t += static_cast<char>(c.kind);
  append_u32(t, static_cast<std::uint32_t>(c.client_rank));
  append_u32(t, static_cast<std::uint32_t>(c.server_rank));
  append_u32(t, static_cast<std::uint32_t>(c.channel));
  auto id = ctx.key.id();
  t += str(id.data(), id.size());
  append_u32(t, static_cast<std::uint32_t>(ctx.scope.size()));
  t += ctx.scope;
  t += str(nonce_c.data(), nonce_c.size());
  t += str(nonce_s.data(), nonce_s.size());
  return t;
}

Bytes32 role_mac(const Context& ctx, const char* role, const std::string& t) {
  return hmac(ctx.key.bytes.data(), ctx.key.bytes.size(), std::string(role) + '\0' + t);
}

// Client-to-server and server-to-client keys.
std::pair<Bytes32, Bytes32> derive(const Context& ctx, const std::string& t, const Bytes32& nc, const Bytes32& ns) {
  std::string salt = str(nc.data(), nc.size()) + str(ns.data(), ns.size());
  return {hkdf(ctx.key, salt, std::string("saker link c2s") + '\0' + t),
          hkdf(ctx.key, salt, std::string("saker link s2c") + '\0' + t)};
}

// The key id a Hello to server_rank carries (-1: the store): an HMAC of the key, so that
// a listener rejects another job's Hello at once; one per target, so that a stranger who
// receives Hellos (on a dead rank's freed port, or a squatted store port) learns no id
// that another rank's listener would take, and cannot hold its handshakes open.
std::array<unsigned char, 8> target_id(const JobKey& key, std::int32_t server_rank) {
  std::string label = "saker key id for";
  append_u32(label, static_cast<std::uint32_t>(server_rank));
  Bytes32 m = hmac(key.bytes.data(), key.bytes.size(), label);
  std::array<unsigned char, 8> out{};
  std::memcpy(out.data(), m.data(), out.size());
  return out;
}

Bytes32 fresh_nonce() {
  Bytes32 n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) throw Error("saker: RAND_bytes failed in OpenSSL libcrypto");
  return n;
}

std::array<unsigned char, kHelloBytes> encode_hello(const Claim& c, const std::array<unsigned char, 8>& key_id,
                                                    const Bytes32& nonce) {
  std::array<unsigned char, kHelloBytes> h{};
  put_u32(&h[0], kMagic);
  h[4] = kVersion;
  h[5] = static_cast<unsigned char>(c.kind);
  put_u32(&h[8], static_cast<std::uint32_t>(c.client_rank));
  put_u32(&h[12], static_cast<std::uint32_t>(c.server_rank));
  put_u32(&h[16], static_cast<std::uint32_t>(c.channel));
  std::memcpy(&h[24], key_id.data(), key_id.size());
  std::memcpy(&h[32], nonce.data(), nonce.size());
  return h;
}

// The claim in a hello, checked for shape (not for truth: the MACs do that).
Claim decode_claim(const unsigned char* h, std::int32_t world_size) {
  if (get_u32(h) != kMagic || h[4] != kVersion)
    throw Refused("not a Saker handshake (wrong magic or version)");
  Claim c;
  if (h[5] < 1 || h[5] > 4) throw Refused("unknown connection kind " + std::to_string(h[5]));
  c.kind = static_cast<Kind>(h[5]);
  c.client_rank = static_cast<std::int32_t>(get_u32(&h[8]));
  c.server_rank = static_cast<std::int32_t>(get_u32(&h[12]));
  c.channel = static_cast<std::int32_t>(get_u32(&h[16]));
  if (c.client_rank < -1 || c.client_rank >= world_size || c.channel < 0 || c.channel > 1024)
    throw Refused("claims rank " + std::to_string(c.client_rank) + " channel " + std::to_string(c.channel) +
                  ", outside a job of " + std::to_string(world_size));
  return c;
}

bool hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string to_hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) { s += digits[p[i] >> 4]; s += digits[p[i] & 15]; }
  return s;
}

std::string octal_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "0%03o", static_cast<unsigned>(m & 0777));
  return b;
}

}  // namespace

// ---- the key ----
JobKey JobKey::parse_hex(const std::string& text, const std::string& source) {
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  bool ok = e - b == 64;
  for (std::size_t i = b; ok && i < e; ++i) ok = hex_digit(text[i]);
  if (!ok)
    throw Error(explain(source + " does not hold a job key", "a job key is 64 hex digits (32 random bytes)",
                        "let saker-run or spank_saker.so set SAKER_JOB_KEY, or write one with "
                        "`openssl rand -hex 32` into a 0600 file and name it in SAKER_JOB_KEY_FILE"));
  JobKey k;
  for (std::size_t i = 0; i < 32; ++i) k.bytes[i] = static_cast<unsigned char>(std::stoi(text.substr(b + 2 * i, 2), nullptr, 16));
  return k;
}

JobKey JobKey::generate() {
  JobKey k;
  if (RAND_bytes(k.bytes.data(), static_cast<int>(k.bytes.size())) != 1)
    throw Error("saker: RAND_bytes failed in OpenSSL libcrypto: cannot make a job key");
  return k;
}

JobKey JobKey::from_raw(const std::string& raw) {
  if (raw.size() != 32)
    throw Error(explain("the job key has " + std::to_string(raw.size()) + " bytes", "a job key is 32 bytes",
                        "pass JobKey::raw() (or leave Options::job_key empty to read SAKER_JOB_KEY)"));
  JobKey k;
  std::memcpy(k.bytes.data(), raw.data(), 32);
  return k;
}

std::string JobKey::hex() const { return to_hex(bytes.data(), bytes.size()); }

std::string JobKey::raw() const { return str(bytes.data(), bytes.size()); }

std::array<unsigned char, 8> JobKey::id() const {
  Bytes32 m = hmac(bytes.data(), bytes.size(), "saker key id");
  std::array<unsigned char, 8> out{};
  std::memcpy(out.data(), m.data(), out.size());
  return out;
}

std::string JobKey::id_hex() const {
  auto i = id();
  return to_hex(i.data(), i.size());
}

JobKey read_key_file(const std::string& path) {
  const std::string fix = "create it as this user with `umask 077; mkdir -p DIR; openssl rand -hex 32 > DIR/key` "
                          "(file 0600 in a 0700 directory), or let saker-run set SAKER_JOB_KEY";
  auto refuse = [&](const std::string& why) -> JobKey {
    throw Error(explain("SAKER_JOB_KEY_FILE " + path + " is refused", why, fix));
  };
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (dir.empty()) dir = "/";
  struct stat ds{};
  if (stat(dir.c_str(), &ds) != 0) return refuse("its directory " + dir + " cannot be read: " + std::strerror(errno));
  if (ds.st_uid != geteuid()) return refuse("its directory " + dir + " belongs to another user (uid " + std::to_string(ds.st_uid) + ")");
  if (ds.st_mode & 077) return refuse("its directory " + dir + " is open to group or others (mode " + octal_mode(ds.st_mode) + ")");
  // O_NONBLOCK: a FIFO in its place must be refused, not wait for a writer.
  net::Fd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return refuse(std::string("it cannot be opened (a symbolic link is refused too): ") + std::strerror(errno));
  struct stat fs{};
  if (fstat(fd.get(), &fs) != 0 || !S_ISREG(fs.st_mode)) return refuse("it is not a regular file");
  if (fs.st_uid != geteuid()) return refuse("it belongs to another user (uid " + std::to_string(fs.st_uid) + ")");
  if (fs.st_mode & 077) return refuse("group or others may read or write it (mode " + octal_mode(fs.st_mode) + ")");
  char buf[160];
  ssize_t n = read(fd.get(), buf, sizeof buf);  // a key file is 64 digits and a newline
  if (n < 0) return refuse(std::string("reading it failed: ") + std::strerror(errno));
  return JobKey::parse_hex(std::string(buf, static_cast<std::size_t>(n)), "SAKER_JOB_KEY_FILE " + path);
}

std::optional<JobKey> key_from_environment() {
  const char* hex = std::getenv("SAKER_JOB_KEY");
  if (hex && *hex) return JobKey::parse_hex(hex, "SAKER_JOB_KEY");
  const char* file = std::getenv("SAKER_JOB_KEY_FILE");
  if (file && *file) return read_key_file(file);
  return std::nullopt;
}

std::string job_scope() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  return std::string("job ") + (job ? job : "") + " step " + (step ? step : "");
}

std::optional<Context> context_for(const Options& options, const std::string& scope) {
  if (options.transit == Transit::off) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      log::warn("comm: SAKER_COMM_TRANSIT=off: connections are not authenticated; anyone who can reach this "
                "job's ports can read its store, join its links or abort it (use it for benchmarks only)");
    });
    return std::nullopt;
  }
  if (options.job_key.empty())
    throw Error(explain("no job key: SAKER_JOB_KEY and SAKER_JOB_KEY_FILE are unset",
                        "every connection between ranks proves the job's key, so that no other user can read, "
                        "poison or abort the job",
                        "start the ranks with saker-run, with srun --mpi=pmi2, or with srun where spank_saker.so "
                        "is in plugstack.conf; or point SAKER_JOB_KEY_FILE at a 0600 file holding "
                        "`openssl rand -hex 32` (the same for every rank)"));
  return Context{JobKey::from_raw(options.job_key), scope};
}

const char* name_of(Kind k) {
  switch (k) {
    case Kind::store: return "store";
    case Kind::link: return "link";
    case Kind::abort: return "abort";
    case Kind::ping: return "ping";
  }
  return "?";
}

// ---- the two halves ----
ClientSide::ClientSide(const Context& ctx, const Claim& claim) : ctx_(ctx), claim_(claim), nonce_c_(fresh_nonce()) {}

std::array<unsigned char, kHelloBytes> ClientSide::hello() const {
  return encode_hello(claim_, target_id(ctx_.key, claim_.server_rank), nonce_c_);
}

std::array<unsigned char, kFinishBytes> ClientSide::on_reply(const unsigned char* reply) {
  if (get_u32(reply) != kMagic) throw Refused("its reply is not a Saker handshake");
  std::memcpy(nonce_s_.data(), reply + 4, 32);
  std::string t = transcript(ctx_, claim_, nonce_c_, nonce_s_);
  Bytes32 expect = role_mac(ctx_, "server", t);
  if (CRYPTO_memcmp(expect.data(), reply + 36, 32) != 0)
    throw Refused("it did not prove this job's key (a different key, job or step, or not a rank of this job)");
  return role_mac(ctx_, "client", t);
}

LinkKeys ClientSide::keys() const {
  auto [c2s, s2c] = derive(ctx_, transcript(ctx_, claim_, nonce_c_, nonce_s_), nonce_c_, nonce_s_);
  return LinkKeys{c2s, s2c};
}

ServerSide::ServerSide(const Context& ctx, std::int32_t my_rank, bool (*accepts)(Kind))
    : ctx_(ctx), my_rank_(my_rank), accepts_(accepts) {}

std::array<unsigned char, kReplyBytes> ServerSide::on_hello(const unsigned char* hello, std::int32_t world_size) {
  claim_ = decode_claim(hello, world_size);
  if (!accepts_(claim_.kind)) throw Refused(std::string("a ") + name_of(claim_.kind) + " connection is not served here");
  if (claim_.server_rank != my_rank_)
    throw Refused("the handshake is meant for rank " + std::to_string(claim_.server_rank) + ", not this one");
  auto id = target_id(ctx_.key, my_rank_);
  if (CRYPTO_memcmp(id.data(), hello + 24, id.size()) != 0)
    throw Refused("it uses another job key (id " + to_hex(hello + 24, 8) + ", ours " + to_hex(id.data(), id.size()) + ")");
  std::memcpy(nonce_c_.data(), hello + 32, 32);
  nonce_s_ = fresh_nonce();
  std::array<unsigned char, kReplyBytes> r{};
  put_u32(&r[0], kMagic);
  std::memcpy(&r[4], nonce_s_.data(), 32);
  Bytes32 mac = role_mac(ctx_, "server", transcript(ctx_, claim_, nonce_c_, nonce_s_));
  std::memcpy(&r[36], mac.data(), 32);
  return r;
}

void ServerSide::on_finish(const unsigned char* finish) {
  Bytes32 expect = role_mac(ctx_, "client", transcript(ctx_, claim_, nonce_c_, nonce_s_));
  if (CRYPTO_memcmp(expect.data(), finish, 32) != 0)
    throw Refused("it did not prove this job's key (a wrong, replayed or reflected MAC)");
}

LinkKeys ServerSide::keys() const {
  auto [c2s, s2c] = derive(ctx_, transcript(ctx_, claim_, nonce_c_, nonce_s_), nonce_c_, nonce_s_);
  return LinkKeys{s2c, c2s};
}

// ---- on a socket ----
LinkKeys connect_handshake(int fd, const Context& ctx, const Claim& claim, net::Deadline d, const std::string& peer) {
  ClientSide c(ctx, claim);
  auto hello = c.hello();
  std::array<unsigned char, kReplyBytes> reply{};
  try {
    net::send_all(fd, hello.data(), hello.size(), d, peer);
    net::recv_all(fd, reply.data(), reply.size(), d, peer);
  } catch (const Error& e) {
    throw NoAnswer(peer + " did not answer the job-key handshake (" + e.what() +
                   "): it is not a Saker rank or store of this job, or it holds another job key");
  }
  std::array<unsigned char, kFinishBytes> finish{};
  try {
    finish = c.on_reply(reply.data());
  } catch (const Refused& e) {
    throw Refused(explain(peer + " failed the job-key handshake", e.what(),
                          "every rank must get the same SAKER_JOB_KEY (saker-run and spank_saker.so set it); "
                          "another program may hold that port"));
  }
  net::send_all(fd, finish.data(), finish.size(), d, peer);
  char ack = 0;
  try {
    net::recv_all(fd, &ack, 1, d, peer);
  } catch (const Error& e) {
    // It proved the key, so it is the peer: the MACs bind the same transcript on both
    // sides, and a listener that closes now dropped this connection to make room (a
    // full table drops unproven connections, admission.hpp). Try again.
    throw NoAnswer(peer + " hung up after its challenge, before accepting this rank's proof (" + e.what() + ")");
  }
  return c.keys();
}

net::Fd connect_authenticated(const std::string& host, int port, const Context* ctx, const Claim& claim,
                              net::Deadline d, const std::string& peer, LinkKeys* keys) {
  for (int attempt = 1;; ++attempt) {
    net::Fd fd = net::connect_to(host, port, d, peer);
    try {
      if (!ctx) {
        send_claim(fd.get(), claim, d, peer);
        return fd;
      }
      LinkKeys k = connect_handshake(fd.get(), *ctx, claim, d, peer);
      if (keys) *keys = k;
      return fd;
    } catch (const NoAnswer&) {
      const auto pause = std::chrono::milliseconds(std::min(1000, 25 << attempt));
      if (attempt >= kConnectTries || net::Clock::now() + pause >= d) throw;
      std::this_thread::sleep_for(pause);
    }
  }
}

Accepted accept_handshake(int fd, const Context& ctx, std::int32_t my_rank, std::int32_t world_size,
                          bool (*accepts)(Kind), net::Deadline d, const std::string& peer) {
  ServerSide s(ctx, my_rank, accepts);
  std::array<unsigned char, kHelloBytes> hello{};
  net::recv_all(fd, hello.data(), hello.size(), d, peer);
  auto reply = s.on_hello(hello.data(), world_size);
  net::send_all(fd, reply.data(), reply.size(), d, peer);
  std::array<unsigned char, kFinishBytes> finish{};
  net::recv_all(fd, finish.data(), finish.size(), d, peer);
  s.on_finish(finish.data());
  const char ack = 1;
  net::send_all(fd, &ack, 1, d, peer);
  return Accepted{s.claim(), s.keys()};
}

void send_claim(int fd, const Claim& claim, net::Deadline d, const std::string& peer) {
  auto h = encode_hello(claim, {}, Bytes32{});
  net::send_all(fd, h.data(), h.size(), d, peer);
}

Claim recv_claim(int fd, std::int32_t world_size, net::Deadline d, const std::string& peer) {
  std::array<unsigned char, kHelloBytes> h{};
  net::recv_all(fd, h.data(), h.size(), d, peer);
  return decode_claim(h.data(), world_size);
}

Claim parse_claim(const unsigned char* hello, std::int32_t world_size) { return decode_claim(hello, world_size); }

std::string peer_address(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "an unknown address";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (sa.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void log_refused(const std::string& where, const std::string& address, const std::string& why) {
  static std::mutex mu;
  static std::map<std::string, std::pair<std::chrono::steady_clock::time_point, long>> seen;  // -> last log, dropped
  // Per listener and host: an attacker changes ports freely.
  std::string host = where + " " + address.substr(0, address.rfind(':'));
  auto now = std::chrono::steady_clock::now();
  long dropped = 0;
  {
    std::lock_guard lock(mu);
    if (seen.size() > 4096) seen.clear();  // bounded memory under a flood of addresses
    auto [it, fresh] = seen.try_emplace(host, now, 0);
    if (!fresh && now - it->second.first < std::chrono::minutes(1)) {
      ++it->second.second;
      return;
    }
    dropped = it->second.second;
    it->second = {now, 0};
  }
  log::warn("comm: " + where + " dropped a connection from " + address + " that did not prove the job key: " + why +
            (dropped ? " (" + std::to_string(dropped) + " more from that host in the last minute)" : "") +
            " (repeats from this host are logged once a minute)");
}

}  // namespace saker::comm::auth
