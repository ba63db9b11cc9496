// saker._ckpt: libsaker_ckpt for Python (saker.torch.checkpoint builds on it).
//
// Tensors cross as (name, dtype name, shape, address, byte count, partitioned): the
// module never sees torch's types. Saves borrow the caller's memory until save() returns
// (save_async() until it returns: the library snapshots first). Loads return bytes.
// The site's residency rule comes from a policy file (saker-policy.yaml(5)), as in
// saker-train; the shard barrier is a Python callable (an allreduce over the job's
// communicator), called with the GIL held.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/policy_guard.hpp"
#include "saker/ckpt.hpp"

namespace py = pybind11;
using namespace saker::ckpt;

namespace {

// (name, dtype, shape, address, bytes, partitioned)
using TensorArg = std::tuple<std::string, std::string, std::vector<std::uint64_t>, std::uintptr_t, std::size_t, bool>;

State make_state(std::uint64_t step, std::uint64_t epoch, std::uint32_t rank, std::uint32_t world,
                 const std::string& config, const std::string& lineage, const std::vector<TensorArg>& tensors) {
  State s;
  s.step = step;
  s.epoch = epoch;
  s.rank = rank;
  s.world_size = world;
  s.config = config;
  s.lineage = parse_lineage(lineage);
  for (const auto& [name, dtype, shape, address, bytes, partitioned] : tensors) {
    const auto* p = reinterpret_cast<const std::byte*>(address);
    s.tensors.push_back(Tensor::view(name, dtype_from_name(dtype), shape, std::span<const std::byte>(p, bytes),
                                     partitioned ? Placement::partitioned : Placement::replicated));
  }
  return s;
}

py::dict report_of(const SaveReport& r) {
  py::dict d;
  d["step"] = r.step;
  d["file"] = r.file.string();
  d["bytes"] = r.bytes;
  d["stall_s"] = r.stall_s;
  d["write_s"] = r.write_s;
  d["committed"] = r.committed;
  return d;
}

class PyCheckpointer {
 public:
  PyCheckpointer(const std::string& dir, std::uint32_t rank, std::uint32_t world, std::uint32_t keep_last,
                 std::uint64_t keep_every, const std::string& key_file, const std::string& policy_file,
                 const std::string& lineage, std::function<bool(bool)> barrier, const std::string& mode)
      : rank_(rank), world_(world), lineage_(lineage) {
    Options o;
    o.access = parse_access(mode);
    o.keep_last = keep_last;
    o.keep_every = keep_every;
    o.key_file = key_file;
    if (!policy_file.empty()) {
      o.guard = PolicyGuard::from_file(policy_file);
      // Before any training step: a refused destination must cost nothing.
      check_destination(*o.guard, dir, parse_lineage(lineage), !key_file.empty());
    }
    if (barrier) {
      o.barrier = [barrier](bool ok) {
        py::gil_scoped_acquire gil;
        return barrier(ok);
      };
    }
    py::gil_scoped_release nogil;
    ck_ = std::make_unique<Checkpointer>(dir, o);
  }

  py::dict save(std::uint64_t step, std::uint64_t epoch, const std::string& config,
                const std::vector<TensorArg>& tensors) {
    State s = make_state(step, epoch, rank_, world_, config, lineage_, tensors);
    SaveReport r;
    {
      py::gil_scoped_release nogil;
      r = ck_->save(s);
    }
    return report_of(r);
  }

  SaveHandle save_async(std::uint64_t step, std::uint64_t epoch, const std::string& config,
                        const std::vector<TensorArg>& tensors) {
    State s = make_state(step, epoch, rank_, world_, config, lineage_, tensors);
    py::gil_scoped_release nogil;
    return ck_->save_async(s);
  }

  py::object load_latest() {
    std::optional<LoadReport> r;
    {
      py::gil_scoped_release nogil;
      r = ck_->load_latest(rank_, world_);
    }
    if (!r) return py::none();
    py::dict tensors;
    for (const Tensor& t : r->state.tensors) {
      tensors[py::str(t.name)] =
          py::make_tuple(std::string(dtype_name(t.dtype)), t.shape,
                         py::bytes(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()));
    }
    py::dict d;
    d["step"] = r->state.step;
    d["epoch"] = r->state.epoch;
    d["config"] = r->state.config;
    d["file"] = r->file.string();
    d["resharded"] = r->resharded;
    d["rejected"] = r->rejected;
    d["tensors"] = tensors;
    return d;
  }

  py::object wait() {
    std::optional<SaveReport> r;
    {
      py::gil_scoped_release nogil;
      r = ck_->wait();
    }
    if (!r) return py::none();
    return report_of(*r);
  }

 private:
  std::uint32_t rank_, world_;
  std::string lineage_;
  std::unique_ptr<Checkpointer> ck_;
};

}  // namespace

PYBIND11_MODULE(_ckpt, m) {
  m.doc() = "libsaker_ckpt on raw host buffers (use saker.torch.checkpoint, not this module)";

  py::class_<SaveHandle>(m, "SaveHandle")
      .def("done", &SaveHandle::done)
      .def("stall_s", &SaveHandle::stall_s)
      .def("wait", [](const SaveHandle& h) {
        SaveReport r;
        {
          py::gil_scoped_release nogil;
          r = h.wait();
        }
        return report_of(r);
      });

  py::class_<PyCheckpointer>(m, "Checkpointer")
      .def(py::init<const std::string&, std::uint32_t, std::uint32_t, std::uint32_t, std::uint64_t,
                    const std::string&, const std::string&, const std::string&, std::function<bool(bool)>,
                    const std::string&>(),
           py::arg("dir"), py::arg("rank"), py::arg("world_size"), py::arg("keep_last") = 3,
           py::arg("keep_every") = 0, py::arg("key_file") = "", py::arg("policy_file") = "",
           py::arg("lineage") = "", py::arg("barrier") = nullptr, py::arg("mode") = "0600")
      .def("save", &PyCheckpointer::save, "Synchronous save (collective when world_size > 1).")
      .def("save_async", &PyCheckpointer::save_async, "Snapshot now, write in the background.")
      .def("wait", &PyCheckpointer::wait, "Wait for the in-flight save; rethrows its error.")
      .def("load_latest", &PyCheckpointer::load_latest,
           "The newest checkpoint that verifies for this rank, or None.");
}
