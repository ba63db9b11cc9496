// Horovod's alltoall (MPI_Alltoallv): the ranks first agree on what moves (agree.hpp),
// then every pair exchanges its rows directly, all pairs at once, over the links the
// ring uses (one socket per direction, sealed frames under Transit::encrypt).
#include <algorithm>
#include <cstring>

#include "launcher/comm/agree.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/ring.hpp"
#include "common/error.hpp"
#include "saker/error.hpp"

namespace saker::comm {

void Ring::alltoallv(const char* send, const std::vector<std::size_t>& send_bytes, char* recv,
                     const std::vector<std::size_t>& recv_bytes) {
  const int n = size();
  SAKER_ASSERT(send_bytes.size() == static_cast<std::size_t>(n) && recv_bytes.size() == send_bytes.size(),
               "alltoallv: one count per member");
  std::vector<std::size_t> soff(send_bytes.size() + 1, 0), roff(soff.size(), 0);
  for (std::size_t j = 0; j < send_bytes.size(); ++j) {
    soff[j + 1] = soff[j] + send_bytes[j];
    roff[j + 1] = roff[j] + recv_bytes[j];
  }
  const auto me = static_cast<std::size_t>(index_);
  SAKER_ASSERT(send_bytes[me] == recv_bytes[me], "alltoallv: what a member sends itself differs from what it expects");
  if (send_bytes[me] > 0) std::memmove(recv + roff[me], send + soff[me], send_bytes[me]);
  if (n == 1) return;
  if (n == 2) {
    // One peer: the ring's own exchange, whose send thread keeps the kernel's send and
    // receive paths busy at once for large buffers. Both members key the choice on the
    // larger direction, which they both know, so they agree on it (send_thread_for).
    const auto peer = 1 - me;
    const std::size_t key = std::max(send_bytes[peer], recv_bytes[peer]);
    const bool threaded = send_thread_for(kAllgather, key);
    const auto started = net::Clock::now();
    exchange(send + soff[peer], send_bytes[peer], recv + roff[peer], recv_bytes[peer], 1, nullptr, false, "alltoall",
             threaded);
    record_phase(kAllgather, key, threaded, started);
    return;
  }
  std::vector<Transfer> xs;
  for (int j = 0; j < n; ++j) {
    const auto u = static_cast<std::size_t>(j);
    if (j != index_) xs.push_back({members_[u], j, send + soff[u], send_bytes[u], recv + roff[u], recv_bytes[u]});
  }
  exchange_all(xs, "alltoall");
}

namespace {

std::vector<std::size_t> bytes_of(const std::vector<std::size_t>& rows, std::size_t row_bytes) {
  std::vector<std::size_t> b(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) b[i] = rows[i] * row_bytes;
  return b;
}

// The ranks' verdict on their declarations (throws agree::Mismatch on every rank
// alike), then what this rank receives from each rank.
std::vector<std::size_t> agreed_receive(const std::vector<agree::Declared>& all, int rank, const std::string& name) {
  std::string why = agree::alltoall_verdict(all);
  if (!why.empty()) agree::refuse("alltoall", name, why);
  std::vector<std::size_t> rows(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) rows[i] = static_cast<std::size_t>(all[i].a[static_cast<std::size_t>(rank)]);
  return rows;
}

// A mismatch is the caller's error, found before any data moved: it must not mark the
// communicator broken (run_guarded does that to every other failure), so the
// declarations are exchanged in one guarded step and judged outside it.
std::vector<std::size_t> declare_and_judge(Communicator::Impl& impl, const agree::Declared& mine, const std::string& name) {
  std::vector<agree::Declared> all;
  impl.run_sync([&] { all = agree::gather(impl.user->ring(), mine); });
  return agreed_receive(all, impl.where.rank, name);
}

}  // namespace

std::vector<std::size_t> Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts,
                                                 std::size_t row_elems, DataType type, const RecvBuffer& recv_buffer,
                                                 const std::string& name) {
  agree::Declared mine = agree::declare(agree::Kind::alltoall, type, row_elems, send_counts, nullptr, size());
  std::vector<std::size_t> recv_rows = declare_and_judge(*impl_, mine, name);
  void* recv = recv_buffer(recv_rows);
  const std::size_t row_bytes = row_elems * size_of(type);
  std::size_t total = 0;
  for (std::size_t r : recv_rows) total += r;
  if (!recv && total * row_bytes > 0)
    throw Error(explain("alltoall" + (name.empty() ? std::string() : " of '" + name + "'") + ": the receive buffer is null",
                        "recv_buffer returned nullptr for " + std::to_string(total) + " rows",
                        "return a buffer of that many rows"));
  impl_->run_sync([&] {
    impl_->user->ring().alltoallv(static_cast<const char*>(send), bytes_of(send_counts, row_bytes),
                                  static_cast<char*>(recv), bytes_of(recv_rows, row_bytes));
  });
  return recv_rows;
}

void Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                             const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                             const std::string& name) {
  agree::Declared mine = agree::declare(agree::Kind::alltoall, type, row_elems, send_counts, &recv_counts, size());
  declare_and_judge(*impl_, mine, name);
  const std::size_t row_bytes = row_elems * size_of(type);
  impl_->run_sync([&] {
    impl_->user->ring().alltoallv(static_cast<const char*>(send), bytes_of(send_counts, row_bytes),
                                  static_cast<char*>(recv), bytes_of(recv_counts, row_bytes));
  });
}

// On the worker, declarations and data in one queued step: a mismatch fails the handle
// (with agree::Mismatch, the same on every rank) and leaves the communicator usable.
Handle submit_refusable(Communicator::Impl& impl, std::function<void()> op, const std::string& what) {
  auto state = std::make_shared<Handle::State>();
  state->what = what;
  state->limit = impl.options.timeout * 4 + std::chrono::seconds(10);
  impl.submit(
      [state, op = std::move(op)] {
        try {
          op();
          state->finish();
        } catch (const agree::Mismatch&) {
          state->finish(std::current_exception());
        } catch (...) {
          state->finish(std::current_exception());
          throw;  // the links are in an unknown state: the communicator is broken
        }
      },
      what);
  return Handle(state);
}

Handle Communicator::alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                     const std::vector<std::size_t>& recv_counts, std::size_t row_elems, DataType type,
                                     const std::string& name) {
  Impl* i = impl_.get();
  agree::Declared mine = agree::declare(agree::Kind::alltoall, type, row_elems, send_counts, &recv_counts, size());
  const std::size_t row_bytes = row_elems * size_of(type);
  return submit_refusable(*i, [=] {
    agreed_receive(agree::gather(i->user->ring(), mine), i->where.rank, name);
    i->user->ring().alltoallv(static_cast<const char*>(send), bytes_of(send_counts, row_bytes), static_cast<char*>(recv),
                              bytes_of(recv_counts, row_bytes));
  }, "alltoall");
}

}  // namespace saker::comm
