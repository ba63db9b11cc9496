// The C ABI (<saker/comm.h>): no exception crosses it; failures become -1 plus a
// thread-local message.
#include "saker/comm.h"

#include <string>
#include <vector>

#include "saker/comm.hpp"

struct saker_comm {
  std::unique_ptr<saker::comm::Communicator> c;
};
struct saker_comm_handle {
  saker::comm::Handle h;
};

namespace {

thread_local std::string g_last_error;

template <class F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_last_error = e.what();
  } catch (...) {
    g_last_error = "saker: unknown error";
  }
  return -1;
}

bool valid(int dtype, int op) { return dtype >= 0 && dtype <= 5 && op >= 0 && op <= 4; }

int bad_args() {
  g_last_error = "saker: invalid argument: a null pointer, or a dtype/op outside the SAKER_COMM_* values";
  return -1;
}

}  // namespace

extern "C" {

const char* saker_comm_last_error(void) { return g_last_error.c_str(); }

int saker_comm_init_from_env(double timeout_s, saker_comm** out) {
  if (!out) return bad_args();
  return guarded([&] {
    saker::comm::Options o = saker::comm::options_from_environment();
    if (timeout_s > 0) o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    o.ignore_environment = true;
    *out = new saker_comm{saker::comm::Communicator::from_environment(o)};
  });
}

int saker_comm_destroy(saker_comm* comm) {
  return guarded([&] { delete comm; });
}

int saker_comm_rank(const saker_comm* comm) { return comm ? comm->c->rank() : -1; }
int saker_comm_size(const saker_comm* comm) { return comm ? comm->c->size() : -1; }
int saker_comm_local_rank(const saker_comm* comm) { return comm ? comm->c->local_rank() : -1; }

int saker_comm_allreduce(saker_comm* comm, void* data, size_t count, int dtype, int op) {
  if (!comm || (!data && count) || !valid(dtype, op)) return bad_args();
  return guarded([&] {
    comm->c->allreduce(data, count, static_cast<saker::comm::DataType>(dtype), static_cast<saker::comm::ReduceOp>(op));
  });
}

int saker_comm_broadcast(saker_comm* comm, void* data, size_t bytes, int root) {
  if (!comm || (!data && bytes)) return bad_args();
  return guarded([&] { comm->c->broadcast(data, bytes, root); });
}

int saker_comm_allgather(saker_comm* comm, const void* send, void* recv, size_t bytes) {
  if (!comm || ((!send || !recv) && bytes)) return bad_args();
  return guarded([&] { comm->c->allgather(send, recv, bytes); });
}

int saker_comm_barrier(saker_comm* comm) {
  if (!comm) return bad_args();
  return guarded([&] { comm->c->barrier(); });
}

int saker_comm_alltoallv(saker_comm* comm, const void* send, const size_t* send_counts, void* recv,
                         const size_t* recv_counts, size_t row_elems, int dtype) {
  if (!comm || !send_counts || !recv_counts || !valid(dtype, 0)) return bad_args();
  return guarded([&] {
    const auto n = static_cast<std::size_t>(comm->c->size());
    comm->c->alltoallv(send, std::vector<std::size_t>(send_counts, send_counts + n), recv,
                       std::vector<std::size_t>(recv_counts, recv_counts + n), row_elems,
                       static_cast<saker::comm::DataType>(dtype));
  });
}

int saker_comm_reduce_scatter(saker_comm* comm, const void* send, void* recv, const size_t* counts, int dtype, int op) {
  if (!comm || !counts || !valid(dtype, op)) return bad_args();
  return guarded([&] {
    const auto n = static_cast<std::size_t>(comm->c->size());
    comm->c->reduce_scatter(send, recv, std::vector<std::size_t>(counts, counts + n),
                            static_cast<saker::comm::DataType>(dtype), static_cast<saker::comm::ReduceOp>(op));
  });
}

int saker_comm_allreduce_async(saker_comm* comm, void* data, size_t count, int dtype, int op, saker_comm_handle** out) {
  if (!comm || !out || (!data && count) || !valid(dtype, op)) return bad_args();
  return guarded([&] {
    *out = new saker_comm_handle{comm->c->allreduce_async(data, count, static_cast<saker::comm::DataType>(dtype),
                                                          static_cast<saker::comm::ReduceOp>(op))};
  });
}

int saker_comm_enqueue_allreduce(saker_comm* comm, const char* name, void* data, size_t count, int dtype, int op,
                                 saker_comm_handle** out) {
  if (!comm || !name || !out || (!data && count) || !valid(dtype, op)) return bad_args();
  return guarded([&] {
    *out = new saker_comm_handle{comm->c->enqueue_allreduce(name, data, count, static_cast<saker::comm::DataType>(dtype),
                                                            static_cast<saker::comm::ReduceOp>(op))};
  });
}

int saker_comm_join(saker_comm* comm, int* last_rank) {
  if (!comm || !last_rank) return bad_args();
  return guarded([&] { *last_rank = comm->c->join(); });
}

int saker_comm_wait(saker_comm_handle* handle) {
  if (!handle) return bad_args();
  int rc = guarded([&] { handle->h.wait(); });
  delete handle;
  return rc;
}

}  // extern "C"
