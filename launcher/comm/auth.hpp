// The job key and the handshake every connection runs before any other byte is
// believed (issue 28; saker-comm(3), AUTHENTICATION).
//
// Trust: the job's owner, root and Slurm hold the key; nobody else. A peer proves it
// holds the key with a mutual HMAC-SHA256 challenge-response over two fresh nonces:
//
//   client -> server  Hello  (64 bytes): magic, version, kind, client rank, server rank,
//                            channel, target key id, client nonce
//
// The target key id is an HMAC of the key and the listener's rank (-1: the store), so a
// listener drops another job's Hello at once, and a stranger who hears Hellos (on a dead
// rank's freed port, a squatted store port) learns no id another listener would take.
//   server -> client  Reply  (68 bytes): magic, server nonce, MAC("server", transcript)
//   client -> server  Finish (32 bytes): MAC("client", transcript)
//   server -> client  Ack    (1 byte)
//
// The transcript binds both nonces, the scope (job, step and the session, when known),
// the key's identity, both ranks, the channel and the kind (store, link, abort, ping):
// a replayed handshake fails on the server's fresh nonce, a re-targeted one (another
// rank, channel or kind) on the MACs, and a reflected MAC on the role label. Every
// message has a fixed size, so nothing read in a handshake sizes an allocation.
//
// What this does not give: every holder of the key is equally trusted, so a rank of the
// job can claim any rank (the claim is bound to the MACs, so no one on the path can
// change it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "launcher/comm/net.hpp"
#include "saker/comm.hpp"

namespace saker::comm::auth {

struct JobKey {
  std::array<unsigned char, 32> bytes{};

  // 64 hex digits (either case; surrounding whitespace ignored). source names where
  // the text came from, for the error; the text itself never appears in one.
  static JobKey parse_hex(const std::string& text, const std::string& source);
  // 32 bytes from OpenSSL's RAND_bytes.
  static JobKey generate();
  // Raw 32 bytes (Options::job_key); throws when the size is wrong.
  static JobKey from_raw(const std::string& raw);
  std::string hex() const;  // 64 lowercase hex digits: for the environment, never logs
  std::string raw() const;  // 32 bytes
  // A short public identity (HMAC of a fixed label): safe to log and to send.
  std::array<unsigned char, 8> id() const;
  std::string id_hex() const;
};

// SAKER_JOB_KEY, else SAKER_JOB_KEY_FILE (see read_key_file), else nothing.
std::optional<JobKey> key_from_environment();
// A file owned by this user, mode 0600 or stricter, in a directory owned by this user
// with no access for group or others, holding 64 hex digits. Anything else throws.
JobKey read_key_file(const std::string& path);

enum class Kind : std::uint8_t { store = 1, link = 2, abort = 3, ping = 4 };
const char* name_of(Kind k);

// What the client claims. The server checks server_rank and kind against itself.
struct Claim {
  Kind kind = Kind::link;
  std::int32_t client_rank = -1;  // -1: not a rank (a store client)
  std::int32_t server_rank = -1;  // -1: not a rank (the store)
  std::int32_t channel = 0;
};

// The shared secret and what every MAC binds besides the claim.
struct Context {
  JobKey key;
  std::string scope;  // e.g. "job 42 step 0 session ab12-77": same on every rank
};

// Per-direction keys for the link (HKDF-SHA256 over the key, both nonces and the
// transcript). The client's send equals the server's recv and vice versa.
struct LinkKeys {
  std::array<unsigned char, 32> send{}, recv{};
};

constexpr std::size_t kHelloBytes = 64;
constexpr std::size_t kReplyBytes = 68;
constexpr std::size_t kFinishBytes = 32;

// A handshake that failed: the peer is not believed. what() says why, never the key.
struct Refused : Error {
  using Error::Error;
};
// The peer closed (or reset) the connection before answering the Hello, or after proving
// the key but before its ack: a listener whose table of unproven connections was full may
// have dropped this one (admission.hpp), so a client tries again, a few times, before it
// believes the port is not its peer's.
struct NoAnswer : Refused {
  using Refused::Refused;
};

// The two halves as message transformers (the store's poll loop drives the server
// half without blocking); connect_handshake/accept_handshake below drive them on a
// blocking socket under a deadline.
class ClientSide {
 public:
  ClientSide(const Context& ctx, const Claim& claim);
  std::array<unsigned char, kHelloBytes> hello() const;
  // Checks the server's reply; returns the finish to send. Throws Refused.
  std::array<unsigned char, kFinishBytes> on_reply(const unsigned char* reply);
  LinkKeys keys() const;  // after on_reply

 private:
  const Context& ctx_;
  Claim claim_;
  std::array<unsigned char, 32> nonce_c_{}, nonce_s_{};
};

class ServerSide {
 public:
  // my_rank: -1 for the store. accept(kind) says which kinds this listener serves.
  ServerSide(const Context& ctx, std::int32_t my_rank, bool (*accepts)(Kind));
  // Checks the hello (magic, version, key id, the claimed server rank and kind, ranks
  // within [-1, world)) and returns the reply. Throws Refused.
  std::array<unsigned char, kReplyBytes> on_hello(const unsigned char* hello, std::int32_t world_size);
  // Checks the client's MAC; throws Refused.
  void on_finish(const unsigned char* finish);
  const Claim& claim() const { return claim_; }
  LinkKeys keys() const;  // after on_finish

 private:
  const Context& ctx_;
  std::int32_t my_rank_;
  bool (*accepts_)(Kind);
  Claim claim_;
  std::array<unsigned char, 32> nonce_c_{}, nonce_s_{};
};

// Client: runs the whole handshake on fd. peer names the server in errors. Throws
// NoAnswer when the server closed before its reply, Refused when it fails to prove the
// key, saker::Error on other I/O.
LinkKeys connect_handshake(int fd, const Context& ctx, const Claim& claim, net::Deadline d,
                           const std::string& peer);
// Client: connects to host:port and runs the handshake (ctx) or sends the bare claim
// (nullptr: Transit::off). A connection dropped before the reply (NoAnswer) is retried
// after a short back-off, at most kConnectTries times in all and never past d; then the
// last NoAnswer is thrown. keys, when given, receives the link keys.
constexpr int kConnectTries = 8;
net::Fd connect_authenticated(const std::string& host, int port, const Context* ctx, const Claim& claim,
                              net::Deadline d, const std::string& peer, LinkKeys* keys = nullptr);

struct Accepted {
  Claim claim;
  LinkKeys keys;
};
// Server: the whole handshake on an accepted fd. Throws Refused or saker::Error.
Accepted accept_handshake(int fd, const Context& ctx, std::int32_t my_rank, std::int32_t world_size,
                          bool (*accepts)(Kind), net::Deadline d, const std::string& peer);

// "job J step S" from SLURM_JOB_ID and SLURM_STEP_ID (empty outside Slurm): the same on
// every rank of a step, so a key reused across jobs still does not join them.
std::string job_scope();
// The context for options (its job_key) and scope; std::nullopt under Transit::off,
// after one warning naming the risk. Throws, naming the fixes, when the key is missing.
std::optional<Context> context_for(const Options& options, const std::string& scope);

// Transit::off (benchmarks only): the claim travels alone, unproven; no reply.
void send_claim(int fd, const Claim& claim, net::Deadline d, const std::string& peer);
Claim recv_claim(int fd, std::int32_t world_size, net::Deadline d, const std::string& peer);
// The bare claim in a Hello's 64 bytes, checked for shape only (Transit::off).
Claim parse_claim(const unsigned char* hello, std::int32_t world_size);

// "a.b.c.d:port" of a connected socket's peer (for logs).
std::string peer_address(int fd);
// Logs a refused connection at most once a minute per listener and host (and counts the rest).
void log_refused(const std::string& where, const std::string& address, const std::string& why);

}  // namespace saker::comm::auth
