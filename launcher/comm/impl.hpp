// Communicator's private state, shared by communicator.cpp, fusion.cpp and nccl.cpp.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "launcher/comm/core.hpp"
#include "launcher/comm/mesh.hpp"
#include "launcher/comm/timeline.hpp"
#include "saker/comm.hpp"

namespace saker::comm {

struct Handle::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::string what;  // for the "did not complete" message
  std::chrono::milliseconds limit{0};
  void finish(std::exception_ptr e = nullptr) {
    std::lock_guard lock(mu);
    done = true;
    error = e;
    cv.notify_all();
  }
};

class FusionEngine;  // fusion.cpp
class NcclBackend;   // nccl.cpp

struct Communicator::Impl {
  Options options;
  Placement where;
  std::shared_ptr<Store> store;
  std::unique_ptr<TcpStoreServer> store_server;  // when this rank serves the store
  std::unique_ptr<Mesh> mesh;
  Topology topo;
  std::unique_ptr<Timeline> timeline;
  std::unique_ptr<telemetry::CommCountersPublisher> counters;  // SAKER_TELEMETRY_DIR (comm_counters.hpp)
  std::unique_ptr<Core> user;    // channel 0
  std::unique_ptr<Core> fusion;  // channel 1
  // The canonical-order sum's node chain (ordered_nodes.hpp, channel 2) under
  // Transit::encrypt: made once, whatever number of chains come and go, since a link's
  // sealing sequence numbers are the link's (a second set would reuse nonces).
  std::unique_ptr<aead::LinkCiphers> chain_ciphers;
  Transport transport = Transport::automatic;  // resolved
  int local_rank = 0;

  // Asynchronous calls run in order on a worker; a synchronous call drains the queue
  // itself (no cross-thread wake-up on the fast path).
  std::mutex exec_mu;  // held while an operation runs
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Handle::State>>> queue;
  bool stopping = false;
  std::thread worker;
  std::exception_ptr broken;  // first failure: every later call reports it

  std::unique_ptr<FusionEngine> fusion_engine;
  std::unique_ptr<NcclBackend> nccl;
  std::string nccl_refused;  // why NCCL cannot serve this job (same on every rank), once known

  void run_guarded(const std::function<void()>& op);  // under exec_mu
  Handle submit(std::function<void()> op, const std::string& what);
  void run_sync(const std::function<void()>& op);
  void drain_locked();
  void with_nccl(const std::function<void(NcclBackend&)>& op);  // collective at first use
};

}  // namespace saker::comm
