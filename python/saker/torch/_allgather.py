"""Horovod's allgather (dimension 0 may differ across ranks; padded only where it does),
grouped_allgather and allgather_object, in submission order after the cross-rank check."""

import pickle

import torch

from . import runtime
from ._allreduce import allreduce
from ._check import _describe, _verify_ordered
from ._handles import (_defer, _grouped, _host_buffer, _lib, _pending, _register, _unnamed, _wait, _wants_grad,
                       synchronize)
from ._ops import Average
from ._process_sets import _no_process_set


def _allgather_bytes(payload):
    """Every rank's byte string (any lengths), in rank order."""
    comm = runtime.comm()
    n = comm.size()
    lengths = torch.zeros(n, dtype=torch.int64)
    mine = torch.tensor([len(payload)], dtype=torch.int64)
    _lib(comm.allgather, mine.data_ptr(), lengths.data_ptr(), 8)
    width = int(lengths.max())
    send = torch.zeros(max(width, 1), dtype=torch.uint8)
    if payload:
        send[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    recv = torch.empty(n * send.numel(), dtype=torch.uint8)
    _lib(comm.allgather, send.data_ptr(), recv.data_ptr(), send.numel())
    rows = recv.view(n, send.numel())
    return [rows[r, : int(lengths[r])].numpy().tobytes() for r in range(n)]


def _gather_counts(comm, count):
    """Every rank's int64 count (rank order), over the ordered allgather."""
    counts = torch.zeros(comm.size(), dtype=torch.int64)
    mine = torch.tensor([count], dtype=torch.int64)
    _lib(comm.allgather, mine.data_ptr(), counts.data_ptr(), 8)
    return counts


def _allgather_start(tensor, desc):
    """Check, learn every rank's row count, start the padded allgather; returns a handle
    whose synchronize() gives the concatenation and the row counts."""
    comm = runtime.comm()
    n = comm.size()
    _verify_ordered(desc)
    t, _ = _host_buffer(tensor.detach())
    if t.dim() == 0:
        t = t.reshape(1)
    rows = _gather_counts(comm, t.shape[0]) if n > 1 else torch.tensor([t.shape[0]])
    tail = tuple(t.shape[1:])
    most = int(rows.max())
    # Padding only where rows differ: a rank that holds the most rows sends its own buffer
    # (the library only reads it), and equal rows need no concatenation afterwards (each
    # is a pass over the whole result: at 4 MiB, as long as the transfer itself).
    if t.shape[0] == most and t.is_contiguous():
        send = t
    else:
        send = torch.zeros((most,) + tail, dtype=t.dtype)
        send[: t.shape[0]] = t
    recv = torch.empty((n * most,) + tail, dtype=t.dtype)
    handle = _lib(comm.allgather_async, send.data_ptr(), recv.data_ptr(), send.numel() * send.element_size())
    even = bool((rows == most).all())

    def finish():
        _wait(handle)
        if even:
            return recv.to(tensor.device), rows
        parts = [recv[r * most: r * most + int(rows[r])] for r in range(n)]
        return torch.cat(parts).to(tensor.device), rows

    return _register([handle], (send, recv), finish)


def _allgather_rows(tensor, desc):
    out, _ = synchronize(_allgather_start(tensor, desc))
    return out


class _AllgatherFn(torch.autograd.Function):
    """Horovod's gradient: this rank's rows of the gradient averaged over ranks."""

    @staticmethod
    def forward(ctx, tensor, name):
        out, rows = synchronize(_allgather_start(tensor, _describe("allgather", name, tensor, ragged=True)))
        r = runtime.rank()
        ctx.span = (int(rows[:r].sum()), int(rows[r]))
        return out

    @staticmethod
    def backward(ctx, grad):
        start, length = ctx.span
        return allreduce(grad, op=Average).narrow(0, start, length), None


def allgather_async(tensor, name=None, process_set=None):
    """Start an allgather (dimension 0 may differ across ranks); synchronize returns it."""
    _no_process_set(process_set)

    def start():
        h = _allgather_start(tensor, _describe("allgather", name, tensor, ragged=True))
        p = _pending[h]
        inner = p.finish
        p.finish = lambda: inner()[0]
        return h
    return _defer("allgather", name, start)


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's tensor along dimension 0 (first dimensions may differ);
    differentiable."""
    _no_process_set(process_set)
    if _wants_grad(tensor):
        return _AllgatherFn.apply(tensor, name)
    return synchronize(allgather_async(tensor, name))


def grouped_allgather_async(tensors, name=None, process_set=None):
    _no_process_set(process_set)
    return _grouped(tensors, name, lambda t, n: allgather_async(t, n), "grouped_allgather")


def grouped_allgather(tensors, name=None, process_set=None):
    """allgather of each tensor of the list; differentiable."""
    _no_process_set(process_set)
    base = name if name is not None else _unnamed("grouped_allgather")
    return [allgather(t, f"{base}.{i}") for i, t in enumerate(tensors)]


def allgather_object(obj, name=None, process_set=None):
    """Every rank's picklable object, as a list in rank order."""
    _no_process_set(process_set)
    _verify_ordered({"kind": "allgather_object", "name": name or "", "dtype": "object", "shape": [],
                     "root": None, "op": None, "ragged": False})
    return [pickle.loads(b) for b in _allgather_bytes(pickle.dumps(obj))]
