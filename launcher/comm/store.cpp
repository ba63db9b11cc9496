// The rendezvous stores: in-memory (threads), TCP (server + client) and Slurm's PMI2 KVS.
#include <fcntl.h>
#include <poll.h>
#include <slurm/pmi2.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "launcher/comm/admission.hpp"
#include "launcher/comm/auth.hpp"
#include "launcher/comm/net.hpp"
#include "saker/comm.hpp"

namespace saker::comm {
namespace {

std::string key_timeout(const std::string& key, const std::string& store, std::chrono::milliseconds t) {
  return explain("rendezvous key '" + key + "' did not appear in " + store + " within " +
                     std::to_string(t.count()) + " ms",
                 "the rank that publishes it has not started, crashed, or uses another store",
                 "check that every rank started with the same world size and store; raise "
                 "SAKER_COMM_TIMEOUT if ranks start far apart");
}

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return kv_.count(key) > 0; }))
      throw Error(key_timeout(key, describe(), timeout));
    return kv_[key];
  }
  std::string describe() const override { return "the in-memory store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

// Wire format, after the job-key handshake (auth.hpp): 'S' u32 klen key u32 vlen value |
// 'G' u32 klen key; the answer to G is u32 vlen value, sent once the key exists.
void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }

// Bounds checked before a length sizes anything, on both sides. The store carries
// rendezvous entries (an address line per rank, the session name: tens of bytes; PMI2
// itself allows 64-byte keys and 1 KiB values), so these leave three orders of
// magnitude of room while a forged length can no longer make either side allocate
// gigabytes (issue 28: a length off the wire sized an allocation unchecked).
constexpr std::uint32_t kMaxKey = 4096;
constexpr std::uint32_t kMaxValue = 1u << 20;

void check_lengths(std::size_t klen, std::size_t vlen, const std::string& where) {
  if (klen > kMaxKey || vlen > kMaxValue)
    throw Error(explain(where + ": a store key of " + std::to_string(klen) + " bytes or a value of " +
                            std::to_string(vlen) + " bytes is too long",
                        "the store holds rendezvous entries: keys up to 4 KiB, values up to 1 MiB",
                        "keep bulk data out of the rendezvous store"));
}

constexpr auth::Claim kStoreClaim{auth::Kind::store, -1, -1, 0};
bool store_kind(auth::Kind k) { return k == auth::Kind::store; }

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, const Options& options)
      : host_(std::move(host)), port_(port), auth_(auth::context_for(options, auth::job_scope())) {
    try {
      fd_ = auth::connect_authenticated(host_, port_, auth_ ? &*auth_ : nullptr, kStoreClaim,
                                        net::deadline_in(options.timeout), describe());
    } catch (const auth::Refused& e) {
      throw Error(explain(describe() + " is not this job's store", e.what(),
                          "another program (perhaps another user's) may hold port " + std::to_string(port_) +
                              ": set SAKER_STORE_PORT (or SAKER_STORE) to a free one, and give every rank the same "
                              "job key"));
    }
  }

  void set(const std::string& key, const std::string& value) override {
    check_lengths(key.size(), value.size(), describe());
    std::string msg = "S";
    put_u32(msg, static_cast<std::uint32_t>(key.size()));
    msg += key;
    put_u32(msg, static_cast<std::uint32_t>(value.size()));
    msg += value;
    std::lock_guard lock(mu_);
    net::send_all(fd_.get(), msg.data(), msg.size(), net::deadline_in(std::chrono::seconds(30)), describe());
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    check_lengths(key.size(), 0, describe());
    std::string msg = "G";
    put_u32(msg, static_cast<std::uint32_t>(key.size()));
    msg += key;
    std::lock_guard lock(mu_);
    auto d = net::deadline_in(timeout);
    net::send_all(fd_.get(), msg.data(), msg.size(), d, describe());
    std::uint32_t len = 0;
    try {
      net::recv_all(fd_.get(), &len, 4, d, describe());
    } catch (const Error& e) {
      if (net::Clock::now() >= d) throw Error(key_timeout(key, describe(), timeout));
      throw;
    }
    check_lengths(key.size(), len, describe() + " (its answer for '" + key + "')");
    std::string value(len, '\0');
    net::recv_all(fd_.get(), value.data(), len, d, describe());
    return value;
  }
  std::string describe() const override {
    return "the TCP store at " + host_ + ":" + std::to_string(port_);
  }

 private:
  std::string host_;
  int port_;
  std::optional<auth::Context> auth_;
  net::Fd fd_;
  std::mutex mu_;
};

// PMI2 calls block inside libpmi2 with no timeout of their own; run them on a helper
// thread and give up after the timeout so that a broken step cannot hang us.
template <class F>
int pmi_bounded(const char* what, std::chrono::milliseconds timeout, F f) {
  auto fut = std::async(std::launch::async, f);
  if (fut.wait_for(timeout) != std::future_status::ready) {
    std::thread([f2 = std::move(fut)]() mutable { f2.wait(); }).detach();
    throw Error(explain(std::string("PMI2 ") + what + " did not return within " +
                            std::to_string(timeout.count()) + " ms",
                        "another task of the step has not reached the rendezvous (crashed or hung)",
                        "check every task's output; raise SAKER_COMM_TIMEOUT if tasks start slowly"));
  }
  return fut.get();
}

class Pmi2Store final : public Store {
 public:
  Pmi2Store(int* rank, int* size) {
    int spawned = 0, appnum = 0;
    if (PMI2_Init(&spawned, size, rank, &appnum) != PMI2_SUCCESS)
      throw Error(explain("PMI2_Init failed", "the step was not started with srun --mpi=pmi2",
                          "run the step with srun --mpi=pmi2"));
    char id[256] = {0};
    if (PMI2_Job_GetId(id, sizeof id) != PMI2_SUCCESS)
      throw Error(explain("PMI2_Job_GetId failed", "the PMI2 server did not answer", "run under srun --mpi=pmi2"));
    job_ = id;
  }
  ~Pmi2Store() override { PMI2_Finalize(); }
  void set(const std::string& key, const std::string& value) override {
    if (key.size() >= PMI2_MAX_KEYLEN || value.size() >= PMI2_MAX_VALLEN)
      throw Error(explain("PMI2 key or value too long: '" + key + "'", "PMI2 limits keys to 64 and values to 1024 bytes",
                          "this is a bug in libsaker_comm; please report it"));
    if (PMI2_KVS_Put(key.c_str(), value.c_str()) != PMI2_SUCCESS)
      throw Error(explain("PMI2_KVS_Put of '" + key + "' failed", "the PMI2 server refused it", "run under srun --mpi=pmi2"));
  }
  void sync(std::chrono::milliseconds timeout) override {
    int rc = pmi_bounded("KVS_Fence", timeout, [] { return PMI2_KVS_Fence(); });
    if (rc != PMI2_SUCCESS)
      throw Error(explain("PMI2_KVS_Fence failed (code " + std::to_string(rc) + ")",
                          "a task of the step left the rendezvous", "check every task's output"));
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    char buf[PMI2_MAX_VALLEN + 1] = {0};
    int out = 0;
    std::string job = job_;
    int rc = pmi_bounded("KVS_Get", timeout, [&] {
      return PMI2_KVS_Get(job.c_str(), PMI2_ID_NULL, key.c_str(), buf, PMI2_MAX_VALLEN, &out);
    });
    if (rc != PMI2_SUCCESS) throw Error(key_timeout(key, describe(), timeout));
    return std::string(buf, std::strlen(buf));
  }
  std::string describe() const override { return "Slurm's PMI2 KVS (job " + job_ + ")"; }

 private:
  std::string job_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, const Options& options) {
  return std::make_shared<TcpStore>(host, port, options);
}

std::shared_ptr<Store> make_pmi2_store(int* rank, int* size) { return std::make_shared<Pmi2Store>(rank, size); }

// ---- server ----
// One poll loop serves every client. A client first runs the job-key handshake, fed
// exactly the bytes each step needs, so a stranger can neither push more than 64 bytes
// nor hold anything past kHandshakeLimit; one that fails is dropped and logged.
struct TcpStoreServer::Impl {
  static constexpr auto kHandshakeLimit = std::chrono::seconds(10);
  static constexpr long kMaxStrangers = 4096;  // above any job's ranks connecting at once
  long max_strangers = kMaxStrangers;          // lowered to a quarter of the descriptor limit
  net::Fd listen;
  int port = 0;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::optional<auth::Context> ctx;  // std::nullopt: Transit::off
  struct Client {
    net::Fd fd;
    std::string address;
    std::unique_ptr<auth::ServerSide> handshake;  // until the client proved the key
    bool authenticated = false;
    net::Deadline handshake_deadline;
    std::string in;
    std::vector<std::string> waiting;  // keys this client asked for, in order
  };
  std::map<std::string, std::string> kv;

  void drop(Client& c, const std::string& why) {
    auth::log_refused("the rendezvous store on port " + std::to_string(port), c.address, why);
    c.fd.reset();
  }

  // Advances the handshake on what arrived; false when the client was dropped.
  bool advance(Client& c) {
    try {
      if (!ctx) {  // Transit::off: the claim alone
        if (c.in.size() < auth::kHelloBytes) return true;
        c.in.erase(0, auth::kHelloBytes);
        c.authenticated = true;
        return true;
      }
      if (!c.handshake) {
        if (c.in.size() < auth::kHelloBytes) return true;
        c.handshake = std::make_unique<auth::ServerSide>(*ctx, -1, store_kind);
        auto reply = c.handshake->on_hello(reinterpret_cast<const unsigned char*>(c.in.data()), 1);
        c.in.erase(0, auth::kHelloBytes);
        net::send_all(c.fd.get(), reply.data(), reply.size(), net::deadline_in(std::chrono::seconds(2)), c.address);
        return true;
      }
      if (c.in.size() < auth::kFinishBytes) return true;
      c.handshake->on_finish(reinterpret_cast<const unsigned char*>(c.in.data()));
      c.in.erase(0, auth::kFinishBytes);
      const char ack = 1;
      net::send_all(c.fd.get(), &ack, 1, net::deadline_in(std::chrono::seconds(2)), c.address);
      c.handshake.reset();
      c.authenticated = true;
      return true;
    } catch (const Error& e) {
      drop(c, e.what());
      return false;
    }
  }

  // How many bytes to read now: a handshake step exactly, else a buffer's worth.
  std::size_t to_read(const Client& c) const {
    if (c.authenticated) return 65536;
    std::size_t need = ctx && c.handshake ? auth::kFinishBytes : auth::kHelloBytes;
    return need - std::min(need, c.in.size());
  }

  void answer(Client& c) {
    // Answer waiting gets in order; stop at the first key not yet set (the client
    // reads replies in the order it asked).
    std::size_t done = 0;
    for (; done < c.waiting.size(); ++done) {
      auto it = kv.find(c.waiting[done]);
      if (it == kv.end()) break;
      std::string msg;
      put_u32(msg, static_cast<std::uint32_t>(it->second.size()));
      msg += it->second;
      try {
        net::send_all(c.fd.get(), msg.data(), msg.size(), net::deadline_in(std::chrono::seconds(10)), "a store client");
      } catch (const Error&) {
        c.fd.reset();
        return;
      }
    }
    c.waiting.erase(c.waiting.begin(), c.waiting.begin() + static_cast<long>(done));
  }
  // Parses complete requests from c.in; returns false on a malformed stream.
  bool parse(Client& c) {
    while (true) {
      if (c.in.size() < 5) return true;
      std::uint32_t klen;
      std::memcpy(&klen, c.in.data() + 1, 4);
      if (klen > kMaxKey) return false;
      std::size_t need = 5 + klen;
      if (c.in[0] == 'S') {
        if (c.in.size() < need + 4) return true;
        std::uint32_t vlen;
        std::memcpy(&vlen, c.in.data() + need, 4);
        if (vlen > kMaxValue) return false;
        if (c.in.size() < need + 4 + vlen) return true;
        kv[c.in.substr(5, klen)] = c.in.substr(need + 4, vlen);
        c.in.erase(0, need + 4 + vlen);
      } else if (c.in[0] == 'G') {
        if (c.in.size() < need) return true;
        c.waiting.push_back(c.in.substr(5, klen));
        c.in.erase(0, need);
      } else {
        return false;
      }
    }
  }
  // Reads what c sent; true when requests may have arrived.
  bool receive(Client& c) {
    char buf[65536];
    ssize_t n = recv(c.fd.get(), buf, std::min(sizeof buf, to_read(c)), MSG_DONTWAIT);
    if (n <= 0) {
      if (!c.authenticated) drop(c, "it hung up during the handshake");
      c.fd.reset();
      return false;
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    if (!c.authenticated) return advance(c) && c.authenticated && parse(c);
    if (!parse(c)) {
      drop(c, "it sent a malformed request or a key or value over the store's bounds");
      return false;
    }
    return true;
  }
  // Drops a connection that has not proved the key: one that has sent nothing if there
  // is one (a rank sends its Hello right after connecting), else one in its handshake (a
  // rank answers the challenge at once; a copy of a Hello seen on the wire never does:
  // issue 28). Among those, the oldest of the host holding the most (admission.hpp).
  // False when every connection has proved the key.
  bool make_room(std::vector<std::unique_ptr<Client>>& clients) {
    for (bool silent_only : {true, false}) {
      std::vector<Client*> candidates;
      std::vector<std::string_view> hosts;
      for (auto& x : clients) {
        if (!x->fd || x->authenticated) continue;
        int n = 0;
        const bool silent = !x->handshake && x->in.empty() && !(ioctl(x->fd.get(), FIONREAD, &n) == 0 && n > 0);
        if (silent_only && !silent) continue;
        candidates.push_back(x.get());
        hosts.push_back(admission::host_of(x->address));
      }
      if (auto v = admission::victim(hosts)) {
        drop(*candidates[*v], silent_only ? "it sent nothing while newer connections needed its place"
                                          : "it did not finish its handshake while newer connections needed its place");
        return true;
      }
    }
    return false;
  }
  // Takes what the kernel holds (the listener is non-blocking), so that a flood cannot
  // keep a full backlog in front of a rank's connection.
  void accept_all(std::vector<std::unique_ptr<Client>>& clients) {
    for (int taken = 0; taken < 1024 && accept_one(clients); ++taken) {}
  }
  // A flood of silent strangers, or of copies of a Hello seen on the wire, must neither
  // exhaust the process's descriptors nor keep a rank out (issue 28): each holds one for
  // at most kHandshakeLimit, at most max_strangers at once, and a full table makes room
  // by dropping an unproven member (make_room) rather than the newcomer. False when nothing more can be accepted now.
  bool accept_one(std::vector<std::unique_ptr<Client>>& clients) {
    net::Fd fd(accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EMFILE && errno != ENFILE) return false;  // none left (EAGAIN)
      if (make_room(clients)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no busy loop on a readable listener
      return false;
    }
    auto c = std::make_unique<Client>();
    c->address = auth::peer_address(fd.get());
    c->fd = std::move(fd);
    auto strangers = std::count_if(clients.begin(), clients.end(), [](const auto& x) { return x->fd && !x->authenticated; });
    if (strangers >= max_strangers && !make_room(clients)) {
      drop(*c, "too many connections are in their handshake at once");
      return true;
    }
    c->handshake_deadline = net::deadline_in(kHandshakeLimit);
    clients.push_back(std::move(c));
    return true;
  }
  void run() {
    std::vector<std::unique_ptr<Client>> clients;
    while (true) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen.get(), POLLIN, 0}};
      for (auto& c : clients) fds.push_back({c->fd.get(), POLLIN, 0});
      if (poll(fds.data(), fds.size(), 1000) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) accept_all(clients);
      bool changed = false;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        Client& c = *clients[i - 2];
        if (c.fd && fds[i].revents) changed |= receive(c);
        if (c.fd && !c.authenticated && net::Clock::now() >= c.handshake_deadline)
          drop(c, "it did not complete the handshake within 10 s");
      }
      if (changed)
        for (auto& c : clients) if (c->fd && c->authenticated) answer(*c);
      std::erase_if(clients, [](const auto& c) { return !c->fd; });
    }
  }
};

TcpStoreServer::TcpStoreServer(int port, const Options& options, const std::string& bind_address)
    : impl_(std::make_unique<Impl>()) {
  impl_->ctx = auth::context_for(options, auth::job_scope());
  if (rlimit r{}; getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    impl_->max_strangers = std::clamp(static_cast<long>(r.rlim_cur / 4), 16L, Impl::kMaxStrangers);
  impl_->listen = net::listen_on(bind_address, port, &impl_->port);
  fcntl(impl_->listen.get(), F_SETFL, fcntl(impl_->listen.get(), F_GETFL) | O_NONBLOCK);  // accept_all
  if (pipe2(impl_->wake, O_CLOEXEC) != 0) throw Error("saker: cannot create a pipe for the store server");
  impl_->thread = std::thread([this] { impl_->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  char c = 1;
  if (write(impl_->wake[1], &c, 1) < 0) {}
  impl_->thread.join();
  close(impl_->wake[0]);
  close(impl_->wake[1]);
}

int TcpStoreServer::port() const { return impl_->port; }

}  // namespace saker::comm
