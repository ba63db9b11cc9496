"""Horovod's reducescatter over libsaker_comm's reduce_scatter (the first half of a ring
allreduce): each rank gets its share of dimension 0 (the first ranks one row more when it
does not divide), with Horovod's numerics (see _ops._postscale)."""

import math

import torch

from . import runtime
from ._allgather import allgather
from ._check import _describe, _verify_ordered
from ._handles import _defer, _done, _grouped, _lib, _unnamed, _wants_grad, synchronize
from ._ops import _NARROW_INTS, Average, Sum, _check_op, _dtype_code, _library_op, _postscale, _scaled
from ._process_sets import _no_process_set
from .compression import Compression


def _even_split(rows, n):
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


def _reducescatter_args(tensor, op):
    op = _check_op(op)
    if op not in (Sum, Average):
        raise ValueError(f"reducescatter: op {op!r} is not Sum or Average")
    if tensor.dim() == 0:
        raise ValueError("reducescatter: the tensor needs at least one dimension")
    return op


def _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor):
    op = _reducescatter_args(tensor, op)
    comm = runtime.comm()
    n, me = comm.size(), comm.rank()
    if name is None:
        name = _unnamed("reducescatter")
    _verify_ordered(_describe("reducescatter", name, tensor, op=op))
    t = tensor.detach().to("cpu")
    narrow = t.dtype in _NARROW_INTS
    buf = t.to(torch.int32) if narrow else t
    buf = _scaled(buf, prescale_factor).contiguous()
    dtype = _dtype_code(buf, f"reducescatter '{name}'")
    sizes = _even_split(t.shape[0], n)
    row = math.prod(t.shape[1:])
    out = torch.empty((sizes[me],) + tuple(t.shape[1:]), dtype=buf.dtype)
    lib_op = _library_op(op, buf)
    _lib(comm.reduce_scatter, buf.data_ptr(), out.data_ptr(), [s * row for s in sizes], dtype, lib_op.code, name)
    result = _postscale(out, op, lib_op, n, postscale_factor)
    return _done(result.to(t.dtype).to(tensor.device))


def reducescatter_async(tensor, name=None, op=None, process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    """Start a reducescatter; synchronize returns this rank's share of dimension 0 of the
    reduction (split as evenly as possible, the first ranks one row more)."""
    _no_process_set(process_set)
    op = _reducescatter_args(tensor, op if op is not None else Average)  # refused at once, as in Horovod
    return _defer("reducescatter", name, lambda: _reducescatter_async(tensor, name, op, prescale_factor,
                                                                      postscale_factor))


class _ReducescatterFn(torch.autograd.Function):
    """Horovod's gradient: the allgather of the gradient, times size() for Sum, and the
    pre- and postscale factors."""

    @staticmethod
    def forward(ctx, tensor, name, op, pre, post):
        ctx.args = (op, pre, post)
        return synchronize(_reducescatter_async(tensor.detach(), name, op, pre, post))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post = ctx.args
        scale = (runtime.size() if op is Sum else 1.0) * pre * post
        return allgather(grad.detach()) * scale, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=None, process_set=None, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This rank's share of dimension 0 of the reduction over ranks (default Average);
    differentiable."""
    _no_process_set(process_set)
    op = op if op is not None else Average
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    if _wants_grad(compressed):
        out = _ReducescatterFn.apply(compressed, name, op, prescale_factor, postscale_factor)
    else:
        out = synchronize(_reducescatter_async(compressed, name, op, prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=None, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0):
    _no_process_set(process_set)
    return _grouped(tensors, name, lambda t, n: reducescatter_async(t, n, op, None, prescale_factor,
                                                                    postscale_factor), "grouped_reducescatter")


def grouped_reducescatter(tensors, name=None, compression=None, op=None, process_set=None, prescale_factor=1.0,
                          postscale_factor=1.0):
    _no_process_set(process_set)
    base = name if name is not None else _unnamed("grouped_reducescatter")
    return [reducescatter(t, f"{base}.{i}", compression, op, None, prescale_factor, postscale_factor)
            for i, t in enumerate(tensors)]
