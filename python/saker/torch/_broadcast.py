"""Horovod's broadcast (in submission order, as in MPI, after the cross-rank check; async
ones start when synchronized, see _handles) and broadcast_object."""

import io

import torch

from . import runtime
from ._allreduce import allreduce
from ._check import _describe, _verify_ordered
from ._handles import _defer, _host_buffer, _lib, _register, _wait, _wants_grad, synchronize
from ._ops import Average
from ._process_sets import _no_process_set


def _broadcast_async(tensor, output, root_rank, name, check=True):
    comm = runtime.comm()
    if check:
        _verify_ordered(_describe("broadcast", name, tensor, root=root_rank))
    if not 0 <= root_rank < comm.size():
        raise ValueError(f"broadcast: root_rank {root_rank} outside 0..{comm.size() - 1}")
    src = tensor if output is tensor else (tensor.detach().clone() if comm.rank() == root_rank else output)
    buf, _ = _host_buffer(src)
    handle = _lib(comm.broadcast_async, buf.data_ptr(), buf.numel() * buf.element_size(), root_rank)

    def finish():
        _wait(handle)
        if buf is not output:
            with torch.no_grad():
                output.copy_(buf)
        return output

    return _register([handle], (buf, tensor, output), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    return _defer("broadcast", name,
                  lambda: _broadcast_async(tensor, torch.empty_like(tensor).contiguous(), root_rank, name))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    return _defer("broadcast", name, lambda: _broadcast_async(tensor, tensor, root_rank, name))


class _BroadcastFn(torch.autograd.Function):
    """Horovod's gradient: the averaged gradient on the root, zero on the other ranks."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        return synchronize(broadcast_async(tensor.detach(), root_rank, name))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average)
        if runtime.rank() != ctx.root:
            reduced = reduced * 0
        return reduced, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor, as a new tensor on every rank; differentiable."""
    _no_process_set(process_set)
    if _wants_grad(tensor):
        return _BroadcastFn.apply(tensor, root_rank, name)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Overwrite tensor with root_rank's, in place."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))

def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's picklable object, on every rank."""
    _no_process_set(process_set)
    comm = runtime.comm()
    _verify_ordered({"kind": "broadcast_object", "name": name or "", "dtype": "object", "shape": [],
                     "root": root_rank, "op": None, "ragged": False})
    if comm.rank() == root_rank:
        sink = io.BytesIO()
        torch.save(obj, sink)
        data = sink.getvalue()
    else:
        data = b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    _lib(comm.broadcast, length.data_ptr(), 8, root_rank)
    buf = torch.zeros(int(length), dtype=torch.uint8)
    if comm.rank() == root_rank and data:
        buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    if buf.numel():
        _lib(comm.broadcast, buf.data_ptr(), buf.numel(), root_rank)
    return torch.load(io.BytesIO(buf.numpy().tobytes()))
