// saker._comm: libsaker_comm for Python, on raw host buffers.
//
// Python passes tensor.data_ptr(), the element count and a dtype code; this module never
// sees torch's types, so it builds against pybind11 alone in seconds (compiling against
// libtorch's headers takes minutes per file). The caller keeps the tensors alive until
// a Handle completes. Every blocking call releases the GIL so that autograd hooks and
// other Python threads keep running while bytes move.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saker/comm.hpp"

namespace py = pybind11;
using namespace saker::comm;

namespace {

void* ptr(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

DataType dtype_of(int code) {
  if (code < 0 || code > static_cast<int>(DataType::i64))
    throw py::value_error("saker._comm: dtype code " + std::to_string(code) + " is not one of saker's (0..5)");
  return static_cast<DataType>(code);
}

ReduceOp op_of(int code) {
  if (code < 0 || code > static_cast<int>(ReduceOp::prod))
    throw py::value_error("saker._comm: reduce op code " + std::to_string(code) + " is not one of saker's (0..4)");
  return static_cast<ReduceOp>(code);
}

Options options_with_timeout(double timeout_s) {
  Options o = options_from_environment();
  if (timeout_s > 0) o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  o.ignore_environment = true;
  return o;
}

}  // namespace

PYBIND11_MODULE(_comm, m) {
  m.doc() = "libsaker_comm on raw host buffers (use saker.torch, not this module)";

  py::class_<Handle>(m, "Handle")
      .def("wait", &Handle::wait, py::call_guard<py::gil_scoped_release>(),
           "Block until done (bounded by the communicator's timeout); raises the operation's error.")
      .def("done", &Handle::done, "True once the operation finished (successfully or not).");

  // The job key comes from SAKER_JOB_KEY / SAKER_JOB_KEY_FILE (never from Python, never
  // through torch's store): clients and server prove it to each other.
  py::class_<TcpStoreServer>(m, "TcpStoreServer")
      .def(py::init([](int port, const std::string& bind_address) {
             return std::make_unique<TcpStoreServer>(port, options_with_timeout(0), bind_address);
           }),
           py::arg("port"), py::arg("bind_address") = "0.0.0.0", py::call_guard<py::gil_scoped_release>())
      .def("port", &TcpStoreServer::port);

  py::class_<Communicator>(m, "Communicator")
      .def_static(
          "from_environment",
          [](double timeout_s) { return Communicator::from_environment(options_with_timeout(timeout_s)); },
          py::arg("timeout_s") = 0.0, py::call_guard<py::gil_scoped_release>(),
          "Bootstrap from PMI2, a Slurm step or SAKER_STORE/MASTER_ADDR (see saker-comm(3)).")
      .def_static(
          "over_tcp_store",
          [](const std::string& host, int port, int rank, int size, const std::string& node,
             const std::string& hostname, double timeout_s) {
            Options o = options_with_timeout(timeout_s);
            Placement where;
            where.rank = rank;
            where.size = size;
            where.node = node;
            where.host = hostname;
            return Communicator::create(make_tcp_store(host, port, o), where, o);
          },
          py::arg("host"), py::arg("port"), py::arg("rank"), py::arg("size"), py::arg("node"),
          py::arg("hostname"), py::arg("timeout_s") = 0.0, py::call_guard<py::gil_scoped_release>(),
          "Bootstrap over a TcpStoreServer at host:port (collective).")
      .def("rank", &Communicator::rank)
      .def("size", &Communicator::size)
      .def("local_rank", &Communicator::local_rank)
      .def("local_size", &Communicator::local_size)
      .def("node_count", &Communicator::node_count)
      .def("host_of", &Communicator::host_of)
      .def("transport", [](const Communicator& c) { return std::string(name_of(c.transport())); })
      .def("timeout_s", [](const Communicator& c) { return c.options().timeout.count() / 1000.0; })
      .def(
          "allreduce",
          [](Communicator& c, std::uintptr_t data, std::size_t count, int dtype, int op) {
            c.allreduce(ptr(data), count, dtype_of(dtype), op_of(op));
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "broadcast",
          [](Communicator& c, std::uintptr_t data, std::size_t bytes, int root) { c.broadcast(ptr(data), bytes, root); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "allgather",
          [](Communicator& c, std::uintptr_t send, std::uintptr_t recv, std::size_t bytes) {
            c.allgather(ptr(send), ptr(recv), bytes);
          },
          py::call_guard<py::gil_scoped_release>())
      .def("barrier", &Communicator::barrier, py::call_guard<py::gil_scoped_release>())
      .def(
          "alltoallv",
          [](Communicator& c, std::uintptr_t send, const std::vector<std::size_t>& send_counts, std::uintptr_t recv,
             const std::vector<std::size_t>& recv_counts, std::size_t row_elems, int dtype, const std::string& name) {
            c.alltoallv(ptr(send), send_counts, ptr(recv), recv_counts, row_elems, dtype_of(dtype), name);
          },
          py::arg("send"), py::arg("send_counts"), py::arg("recv"), py::arg("recv_counts"), py::arg("row_elems"),
          py::arg("dtype"), py::arg("name") = "", py::call_guard<py::gil_scoped_release>(),
          "Alltoall of rows (counts per rank, both sides); a mismatch across ranks raises on every rank.")
      .def(
          "alltoallv_learn",
          [](Communicator& c, std::uintptr_t send, const std::vector<std::size_t>& send_counts, std::size_t row_elems,
             int dtype, const py::function& alloc, const std::string& name) {
            // alloc(recv_counts) -> the receive buffer's address; called with the GIL held.
            return c.alltoallv(ptr(send), send_counts, row_elems, dtype_of(dtype),
                               [&alloc](const std::vector<std::size_t>& counts) {
                                 py::gil_scoped_acquire gil;
                                 return ptr(alloc(counts).cast<std::uintptr_t>());
                               },
                               name);
          },
          py::arg("send"), py::arg("send_counts"), py::arg("row_elems"), py::arg("dtype"), py::arg("alloc"),
          py::arg("name") = "", py::call_guard<py::gil_scoped_release>(),
          "Alltoall whose receive counts are learned first: alloc(counts) returns the receive buffer's address.")
      .def(
          "reduce_scatter",
          [](Communicator& c, std::uintptr_t send, std::uintptr_t recv, const std::vector<std::size_t>& counts, int dtype,
             int op, const std::string& name) {
            c.reduce_scatter(ptr(send), ptr(recv), counts, dtype_of(dtype), op_of(op), name);
          },
          py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("dtype"), py::arg("op"), py::arg("name") = "",
          py::call_guard<py::gil_scoped_release>(),
          "Reduce-scatter: this rank receives counts[rank] elements; a mismatch across ranks raises on every rank.")
      .def(
          "alltoallv_async",
          [](Communicator& c, std::uintptr_t send, const std::vector<std::size_t>& send_counts, std::uintptr_t recv,
             const std::vector<std::size_t>& recv_counts, std::size_t row_elems, int dtype, const std::string& name) {
            return c.alltoallv_async(ptr(send), send_counts, ptr(recv), recv_counts, row_elems, dtype_of(dtype), name);
          },
          py::arg("send"), py::arg("send_counts"), py::arg("recv"), py::arg("recv_counts"), py::arg("row_elems"),
          py::arg("dtype"), py::arg("name") = "", py::call_guard<py::gil_scoped_release>())
      .def(
          "reduce_scatter_async",
          [](Communicator& c, std::uintptr_t send, std::uintptr_t recv, const std::vector<std::size_t>& counts, int dtype,
             int op, const std::string& name) {
            return c.reduce_scatter_async(ptr(send), ptr(recv), counts, dtype_of(dtype), op_of(op), name);
          },
          py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("dtype"), py::arg("op"), py::arg("name") = "",
          py::call_guard<py::gil_scoped_release>())
      .def("join", &Communicator::join, py::call_guard<py::gil_scoped_release>(),
           "Horovod's join: stand in for named allreduces until every rank joined; returns the last.")
      .def(
          "allreduce_async",
          [](Communicator& c, std::uintptr_t data, std::size_t count, int dtype, int op) {
            return c.allreduce_async(ptr(data), count, dtype_of(dtype), op_of(op));
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "broadcast_async",
          [](Communicator& c, std::uintptr_t data, std::size_t bytes, int root) {
            return c.broadcast_async(ptr(data), bytes, root);
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "allgather_async",
          [](Communicator& c, std::uintptr_t send, std::uintptr_t recv, std::size_t bytes) {
            return c.allgather_async(ptr(send), ptr(recv), bytes);
          },
          py::call_guard<py::gil_scoped_release>())
      .def("barrier_async", &Communicator::barrier_async, py::call_guard<py::gil_scoped_release>())
      .def_static("nccl_available", &Communicator::nccl_available,
                  "True when libsaker_comm was built with CUDA and NCCL and a device is visible.")
      .def("nccl_device", &Communicator::nccl_device, py::call_guard<py::gil_scoped_release>(),
           "Set NCCL up (collective); returns the CUDA device this rank drives.")
      .def(
          "allreduce_device",
          [](Communicator& c, std::uintptr_t data, std::size_t count, int dtype, int op, std::uintptr_t stream) {
            c.allreduce_device(ptr(data), count, dtype_of(dtype), op_of(op), ptr(stream));
          },
          py::call_guard<py::gil_scoped_release>(),
          "NCCL allreduce of device memory, enqueued on the given cudaStream_t (returns once enqueued).")
      .def(
          "enqueue_allreduce",
          [](Communicator& c, const std::string& name, std::uintptr_t data, std::size_t count, int dtype, int op,
             const std::vector<std::int64_t>& shape) {
            return c.enqueue_allreduce(name, ptr(data), count, dtype_of(dtype), op_of(op), shape);
          },
          py::arg("name"), py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"),
          py::arg("shape") = std::vector<std::int64_t>{}, py::call_guard<py::gil_scoped_release>(),
          "Named allreduce through the fusion buffer (any order across ranks). The ranks compare each name's "
          "type, op, count and, when given, shape (the tensor's dimensions) before any byte moves.");
}
