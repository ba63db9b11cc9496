"""Horovod's tensor collectives over libsaker_comm.

Allreduces go through Saker's fusion buffer under a name (the caller's, or a counter's
when none is given), so named tensors may be submitted in any order across ranks and a
name some rank never submits shows up in the stall report. Broadcasts and allgathers run
in submission order, as in MPI. Tensors live in host memory; device tensors are staged
through a host copy.
"""

import io
import itertools
import pickle

import torch

from . import runtime


class _ReduceOp:
    def __init__(self, name, code):
        self.name, self.code = name, code

    def __repr__(self):
        return "saker.torch." + self.name


Average = _ReduceOp("Average", 3)
Sum = _ReduceOp("Sum", 0)
Min = _ReduceOp("Min", 1)
Max = _ReduceOp("Max", 2)
Adasum = _ReduceOp("Adasum", None)
Product = _ReduceOp("Product", None)

_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3, torch.int32: 4, torch.int64: 5}


def _check_op(op):
    if op is Adasum:
        raise NotImplementedError("saker.torch does not implement Adasum; use op=saker.torch.Average "
                                  "(and scale the learning rate by size()), which Saker's ring reduces exactly")
    if op is Product:
        raise NotImplementedError("saker.torch does not implement Product; reduce log-values with Sum instead")
    if not isinstance(op, _ReduceOp):
        raise ValueError(f"op={op!r} is not one of saker.torch.Average, Sum, Min, Max")
    return op


def _resolve_op(average, op):
    if average is not None:
        if op is not None:
            raise ValueError("allreduce: give either average= (deprecated) or op=, not both")
        return Average if average else Sum
    return _check_op(op if op is not None else Average)


def _dtype_code(tensor, what):
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise TypeError(f"{what}: saker reduces float32/float64/float16/bfloat16/int32/int64 tensors, "
                        f"not {tensor.dtype}; cast the tensor first") from None


class _Pending:
    """One in-flight operation: the library handle(s), the tensors they write, and what
    synchronize() still has to do (copy back, scale, decompress)."""

    def __init__(self, handles, keep, finish):
        self.handles, self.keep, self.finish = handles, keep, finish


_pending = {}
_next_handle = itertools.count()
_noname = itertools.count()


def _register(handles, keep, finish):
    h = next(_next_handle)
    _pending[h] = _Pending(handles, keep, finish)
    return h


def _host_buffer(tensor):
    """A contiguous host tensor the library may read and write, and whether it is a copy."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        return tensor, False
    return tensor.detach().to("cpu", copy=True).contiguous(), True


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, compression):
    op = _check_op(op)
    comm = runtime.comm()
    if name is None:
        name = f"allreduce.noname.{next(_noname)}"
    compressed, ctx = compression.compress(tensor)
    buf, copied = _host_buffer(compressed)
    if buf is tensor and output is not tensor:
        buf, copied = buf.clone(), True
    if prescale_factor != 1.0:
        buf.mul_(prescale_factor)
    integral = not buf.is_floating_point()
    code = Sum.code if (op is Average and integral) else op.code  # integers: sum, then floor-divide
    handle = comm.enqueue_allreduce(name, buf.data_ptr(), buf.numel(), _dtype_code(buf, f"allreduce '{name}'"), code)

    def finish():
        result = buf
        if op is Average and integral:
            result = torch.div(result, comm.size(), rounding_mode="floor")
        result = compression.decompress(result, ctx)
        if postscale_factor != 1.0:
            result = result * postscale_factor
        if result is not output:
            with torch.no_grad():
                output.copy_(result.view_as(output))
        return output

    return _register([handle], (buf, tensor, output), finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, compression=None):
    """Start an allreduce into a new tensor; synchronize(handle) returns it."""
    _no_process_set(process_set)
    from .optimizer import Compression
    output = torch.empty_like(tensor)
    return _allreduce_async(tensor, output, name, _resolve_op(average, op), prescale_factor, postscale_factor,
                            compression or Compression.none)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, compression=None):
    """Start an in-place allreduce of tensor; synchronize(handle) returns it."""
    _no_process_set(process_set)
    from .optimizer import Compression
    return _allreduce_async(tensor, tensor, name, _resolve_op(average, op), prescale_factor, postscale_factor,
                            compression or Compression.none)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Reduce tensor over all ranks (default: Average) into a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                                       compression))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """Reduce tensor over all ranks, in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped(tensors, name, start):
    base = name if name is not None else f"grouped_allreduce.noname.{next(_noname)}"
    handles = [start(t, f"{base}.{i}") for i, t in enumerate(tensors)]
    inner = [_pending.pop(h) for h in handles]
    return _register([x for p in inner for x in p.handles], inner, lambda: [p.finish() for p in inner])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    """Start allreduces of a list of tensors as one fusion group; synchronize returns the list."""
    return _grouped(tensors, name, lambda t, n: allreduce_async(t, average, n, op, prescale_factor,
                                                                postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    return _grouped(tensors, name, lambda t, n: allreduce_async_(t, average, n, op, prescale_factor,
                                                                 postscale_factor, process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def poll(handle):
    """True when the operation behind handle finished (synchronize will not block)."""
    return all(h.done() for h in _pending[handle].handles)


def synchronize(handle):
    """Wait for an async operation and return its output."""
    p = _pending.pop(handle)
    for h in p.handles:
        h.wait()
    return p.finish()


def _broadcast_async(tensor, output, root_rank):
    comm = runtime.comm()
    if not 0 <= root_rank < comm.size():
        raise ValueError(f"broadcast: root_rank {root_rank} outside 0..{comm.size() - 1}")
    src = tensor if output is tensor else (tensor.clone() if comm.rank() == root_rank else output)
    buf, _ = _host_buffer(src)
    handle = comm.broadcast_async(buf.data_ptr(), buf.numel() * buf.element_size(), root_rank)

    def finish():
        if buf is not output:
            with torch.no_grad():
                output.copy_(buf)
        return output

    return _register([handle], (buf, tensor, output), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    return _broadcast_async(tensor, torch.empty_like(tensor).contiguous(), root_rank)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    return _broadcast_async(tensor, tensor, root_rank)


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor, as a new tensor on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Overwrite tensor with root_rank's, in place."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _allgather_bytes(payload):
    """Every rank's byte string (any lengths), in rank order."""
    comm = runtime.comm()
    n = comm.size()
    lengths = torch.zeros(n, dtype=torch.int64)
    mine = torch.tensor([len(payload)], dtype=torch.int64)
    comm.allgather(mine.data_ptr(), lengths.data_ptr(), 8)
    width = int(lengths.max())
    send = torch.zeros(max(width, 1), dtype=torch.uint8)
    if payload:
        send[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    recv = torch.empty(n * send.numel(), dtype=torch.uint8)
    comm.allgather(send.data_ptr(), recv.data_ptr(), send.numel())
    rows = recv.view(n, send.numel())
    return [rows[r, : int(lengths[r])].numpy().tobytes() for r in range(n)]


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's tensor along dimension 0 (first dimensions may differ)."""
    _no_process_set(process_set)
    comm = runtime.comm()
    n = comm.size()
    t, _ = _host_buffer(tensor)
    rows = torch.zeros(n, dtype=torch.int64)
    mine = torch.tensor([t.shape[0] if t.dim() else 1], dtype=torch.int64)
    comm.allgather(mine.data_ptr(), rows.data_ptr(), 8)
    tail = tuple(t.shape[1:]) if t.dim() else ()
    most = int(rows.max())
    send = torch.zeros((most,) + tail, dtype=t.dtype)
    send[: int(mine)] = t.reshape((int(mine),) + tail)
    recv = torch.empty((n * most,) + tail, dtype=t.dtype)
    comm.allgather(send.data_ptr(), recv.data_ptr(), send.numel() * send.element_size())
    parts = [recv[r * most: r * most + int(rows[r])] for r in range(n)]
    return torch.cat(parts).to(tensor.device)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's picklable object, on every rank."""
    _no_process_set(process_set)
    comm = runtime.comm()
    if comm.rank() == root_rank:
        sink = io.BytesIO()
        torch.save(obj, sink)
        data = sink.getvalue()
    else:
        data = b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    comm.broadcast(length.data_ptr(), 8, root_rank)
    buf = torch.zeros(int(length), dtype=torch.uint8)
    if comm.rank() == root_rank and data:
        buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    if buf.numel():
        comm.broadcast(buf.data_ptr(), buf.numel(), root_rank)
    return torch.load(io.BytesIO(buf.numpy().tobytes()))


def allgather_object(obj, name=None, process_set=None):
    """Every rank's picklable object, as a list in rank order."""
    _no_process_set(process_set)
    return [pickle.loads(b) for b in _allgather_bytes(pickle.dumps(obj))]


def barrier(process_set=None):
    _no_process_set(process_set)
    runtime.comm().barrier()


def join(device=-1):
    """Horovod's join: this rank ran out of data. Until every rank has joined, it stands in
    for each named allreduce the others run (DistributedOptimizer's gradients, allreduce
    with or without a name), contributing zeros (Average still divides by size()), or the
    type's largest/lowest value for Min/Max. Returns the rank that joined last. Broadcasts
    and allgathers still need every rank: do not call them while a rank may have joined.
    device is accepted for Horovod compatibility (tensors are staged through host memory)."""
    if not isinstance(device, int):
        raise TypeError(f"join(device={device!r}): device is a CUDA device index or -1")
    return runtime.comm().join()


def _no_process_set(process_set):
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError("saker.torch: process sets are not supported; run each group of ranks as its "
                                  "own job step")


class _GlobalProcessSet:
    """Horovod's global_process_set: every rank (the only set Saker supports)."""

    def size(self):
        return runtime.size()

    def rank(self):
        return runtime.rank()

    def included(self):
        return True


global_process_set = _GlobalProcessSet()
