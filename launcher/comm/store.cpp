// The rendezvous stores: in-memory (threads), TCP (server + client) and Slurm's PMI2 KVS.
#include <fcntl.h>
#include <poll.h>
#include <slurm/pmi2.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "common/error.hpp"
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

// Wire format, both directions: 'S' u32 klen key u32 vlen value | 'G' u32 klen key;
// the answer to G is u32 vlen value, sent once the key exists.
void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port),
        fd_(net::connect_to(host_, port_, net::deadline_in(timeout), "the rendezvous store")) {}

  void set(const std::string& key, const std::string& value) override {
    std::string msg = "S";
    put_u32(msg, static_cast<std::uint32_t>(key.size()));
    msg += key;
    put_u32(msg, static_cast<std::uint32_t>(value.size()));
    msg += value;
    std::lock_guard lock(mu_);
    net::send_all(fd_.get(), msg.data(), msg.size(), net::deadline_in(std::chrono::seconds(30)), describe());
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
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

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, std::chrono::milliseconds timeout) {
  return std::make_shared<TcpStore>(host, port, timeout);
}

std::shared_ptr<Store> make_pmi2_store(int* rank, int* size) { return std::make_shared<Pmi2Store>(rank, size); }

// ---- server ----
struct TcpStoreServer::Impl {
  net::Fd listen;
  int port = 0;
  int wake[2] = {-1, -1};
  std::thread thread;
  struct Client {
    net::Fd fd;
    std::string in;
    std::vector<std::string> waiting;  // keys this client asked for, in order
  };
  std::map<std::string, std::string> kv;

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
      if (klen > (1u << 20)) return false;
      std::size_t need = 5 + klen;
      if (c.in[0] == 'S') {
        if (c.in.size() < need + 4) return true;
        std::uint32_t vlen;
        std::memcpy(&vlen, c.in.data() + need, 4);
        if (vlen > (16u << 20)) return false;
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
  void run() {
    std::vector<std::unique_ptr<Client>> clients;
    while (true) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen.get(), POLLIN, 0}};
      for (auto& c : clients) fds.push_back({c->fd.get(), POLLIN, 0});
      if (poll(fds.data(), fds.size(), 1000) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        net::Fd fd(accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (fd) clients.push_back(std::make_unique<Client>(Client{std::move(fd), {}, {}}));
      }
      bool changed = false;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Client& c = *clients[i - 2];
        char buf[65536];
        ssize_t n = recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) { c.fd.reset(); continue; }
        c.in.append(buf, static_cast<std::size_t>(n));
        if (!parse(c)) c.fd.reset();
        changed = true;
      }
      if (changed)
        for (auto& c : clients) if (c->fd) answer(*c);
      std::erase_if(clients, [](const auto& c) { return !c->fd; });
    }
  }
};

TcpStoreServer::TcpStoreServer(int port, const std::string& bind_address) : impl_(std::make_unique<Impl>()) {
  impl_->listen = net::listen_on(bind_address, port, &impl_->port);
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
