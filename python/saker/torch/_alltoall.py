"""Horovod's alltoall over libsaker_comm's alltoallv (every pair of ranks exchanges its rows
directly): every rank's splits travel in the cross-rank check's own round, so a bad one
fails on every rank alike before any byte moves."""

import math

import torch

from . import runtime
from ._check import _describe, _verify_ordered
from ._handles import _defer, _done, _host_buffer, _lib, _pending, _wants_grad, synchronize
from ._ops import _DTYPES
from ._process_sets import _no_process_set


def _alltoall_start(tensor, splits, name):
    comm = runtime.comm()
    n, me = comm.size(), comm.rank()
    t, _ = _host_buffer(tensor.detach())
    if t.dim() == 0:
        raise ValueError("alltoall: the tensor needs at least one dimension")
    # Every rank's splits ride in the cross-rank check's own round (one table, each rank
    # filling its row), so that every rank sees them all before any byte moves and a bad
    # one fails on every rank alike.
    row, mine = _alltoall_row(t.shape[0], splits, n)
    table = torch.zeros(n, n + 2, dtype=torch.int64)
    table[me] = row
    got = _verify_ordered(_describe("alltoall", name, tensor, ragged=True), extra=table)
    table = got.view(n, n + 2) if got is not None else table
    for r in range(n):
        _alltoall_refusal(name, r, table[r].tolist(), n)
    received = table[:, me]
    tail = tuple(t.shape[1:])
    out = torch.empty((int(received.sum()),) + tail, dtype=t.dtype)
    row_elems = math.prod(tail)
    code = _DTYPES.get(t.dtype)
    if code is None:  # uint8/int8/int16/bool: moved as their bytes (never reduced)
        _alltoall_bytes(comm, t, out, mine, received, row_elems * t.element_size(), name)
    else:
        # The library checks type, row size and counts across ranks before any byte
        # moves (a mismatch raises on every rank), then every pair exchanges directly.
        _lib(comm.alltoallv, t.data_ptr(), mine, out.data_ptr(), received.tolist(), row_elems, code, name or "")
    return _done((out.to(tensor.device), received.to(torch.int32)))


_SPLITS_NOT_INT, _ROWS_NOT_EVEN = -2, -3  # in a row's length column: why its splits are refused


def _alltoall_row(rows, splits, n):
    """This rank's row of the splits table: n counts, their number, the first dimension.
    Splits that are not integers, or no splits and rows that do not divide evenly
    (Horovod's rule), are marked in the length column instead, for every rank to refuse."""
    if splits is None:
        mine = [rows // n] * n
        length = n if rows % n == 0 else _ROWS_NOT_EVEN
    elif torch.is_tensor(splits) and (splits.is_floating_point() or splits.is_complex() or splits.dtype == torch.bool):
        mine, length = [], _SPLITS_NOT_INT
    else:
        mine = [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
        length = len(mine)
    return torch.tensor((mine + [-1] * n)[:n] + [length, rows], dtype=torch.int64), mine


def _alltoall_refusal(name, r, row, n):
    got, length, rows = row[:n], row[n], row[n + 1]
    what = f"alltoall of tensor '{name or ''}': rank {r}"
    if length == _SPLITS_NOT_INT:
        raise ValueError(f"{what} gave splits that are not integers; pass a tensor of int32 counts")
    if length == _ROWS_NOT_EVEN:
        raise ValueError(f"{what} gave no splits and its first dimension ({rows}) is not a multiple of the "
                         f"number of ranks ({n}); pass splits, or a first dimension divisible by {n}")
    if length != n or any(s < 0 for s in got) or sum(got) != rows:
        raise ValueError(f"{what}'s splits {got[:max(length, 0)]} must be {n} non-negative counts that add up "
                         f"to its first dimension ({rows})")


def _alltoall_bytes(comm, t, out, mine, received, row_bytes, name):
    """Rows of a type the library does not know travel as int32 words, padded (the
    cross-rank check has compared the dtypes' names already)."""
    words = (row_bytes + 3) // 4
    send = torch.zeros(t.shape[0], words * 4, dtype=torch.uint8)
    per_row = row_bytes // t.element_size()
    send[:, :row_bytes] = t.reshape(t.shape[0], per_row).view(torch.uint8)
    recv = torch.empty(out.shape[0], words * 4, dtype=torch.uint8)
    _lib(comm.alltoallv, send.data_ptr(), mine, recv.data_ptr(), received.tolist(), words, _DTYPES[torch.int32],
         name or "")
    out.view(out.shape[0], per_row).view(torch.uint8)[:] = recv[:, :row_bytes]


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Start an alltoall; synchronize returns the output, and the received splits when
    splits were given (Horovod's forms)."""
    _no_process_set(process_set)

    def start():
        h = _alltoall_start(tensor, splits, name)
        if splits is None:
            p = _pending[h]
            inner = p.finish
            p.finish = lambda: inner()[0]
        return h
    return _defer("alltoall", name, start)


class _AlltoallFn(torch.autograd.Function):
    """Horovod's gradient: the gradient goes back where its rows came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name):
        out, received = synchronize(_alltoall_start(tensor, splits, name))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = synchronize(_alltoall_start(grad, ctx.received, None))
        return back, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatter slices of dimension 0 (splits[k] rows to rank k; even slices without
    splits) and gather what every rank sent here, in rank order. Returns the output, and
    the received splits when splits were given; differentiable."""
    _no_process_set(process_set)
    if _wants_grad(tensor):
        out, received = _AlltoallFn.apply(tensor, splits, name)
    else:
        out, received = synchronize(_alltoall_start(tensor, splits, name))
    return out if splits is None else (out, received)
