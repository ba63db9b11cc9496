/* libsaker_comm's C ABI, for bindings from other languages (ctypes, cffi, Rust, Julia).
 * Every function returns 0 on success and -1 on failure; saker_comm_last_error()
 * then gives the message (thread-local, valid until the next call on that thread).
 * Bootstrap and tuning read the environment described in <saker/comm.hpp>. */
#ifndef SAKER_COMM_H
#define SAKER_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct saker_comm saker_comm;          /* a communicator */
typedef struct saker_comm_handle saker_comm_handle; /* an asynchronous call */

enum saker_comm_dtype {
  SAKER_COMM_F32 = 0, SAKER_COMM_F64 = 1, SAKER_COMM_F16 = 2,
  SAKER_COMM_BF16 = 3, SAKER_COMM_I32 = 4, SAKER_COMM_I64 = 5
};
enum saker_comm_op {
  SAKER_COMM_SUM = 0, SAKER_COMM_MIN = 1, SAKER_COMM_MAX = 2, SAKER_COMM_AVG = 3,
  SAKER_COMM_PROD = 4 /* not through saker_comm_enqueue_allreduce (the fusion negotiation) */
};

const char* saker_comm_last_error(void);

/* timeout_s <= 0 keeps the default (or SAKER_COMM_TIMEOUT). */
int saker_comm_init_from_env(double timeout_s, saker_comm** out);
int saker_comm_destroy(saker_comm* comm);
int saker_comm_rank(const saker_comm* comm);
int saker_comm_size(const saker_comm* comm);
int saker_comm_local_rank(const saker_comm* comm);

int saker_comm_allreduce(saker_comm* comm, void* data, size_t count, int dtype, int op);
int saker_comm_broadcast(saker_comm* comm, void* data, size_t bytes, int root);
int saker_comm_allgather(saker_comm* comm, const void* send, void* recv, size_t bytes);
int saker_comm_barrier(saker_comm* comm);
/* Horovod's alltoall (Communicator::alltoallv): send_counts[j] rows of row_elems elements
   go to rank j, recv_counts[j] rows arrive from rank j; both arrays hold size() counts.
   Counts, type or row size that do not match across ranks fail on every rank alike,
   before any data moves, and the communicator stays usable. */
int saker_comm_alltoallv(saker_comm* comm, const void* send, const size_t* send_counts, void* recv,
                         const size_t* recv_counts, size_t row_elems, int dtype);
/* Reduce-scatter (Communicator::reduce_scatter): send holds the sum of counts[0..size())
   elements; recv receives counts[rank] of them, reduced over every rank. */
int saker_comm_reduce_scatter(saker_comm* comm, const void* send, void* recv, const size_t* counts, int dtype, int op);

int saker_comm_allreduce_async(saker_comm* comm, void* data, size_t count, int dtype, int op,
                               saker_comm_handle** out);
int saker_comm_enqueue_allreduce(saker_comm* comm, const char* name, void* data, size_t count,
                                 int dtype, int op, saker_comm_handle** out);
/* Horovod's join (see Communicator::join): blocks until every rank joined; *last_rank
   receives the rank that joined last. */
int saker_comm_join(saker_comm* comm, int* last_rank);
/* Waits, then frees the handle (whatever the outcome). */
int saker_comm_wait(saker_comm_handle* handle);

#ifdef __cplusplus
}
#endif

#endif /* SAKER_COMM_H */
