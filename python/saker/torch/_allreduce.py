"""Horovod's allreduce over libsaker_comm's fusion buffer: a named tensor, in any order
across ranks (a name some rank never submits shows up in the stall report), its
fingerprint for the cross-rank check fused with it (see _check), and Horovod's numerics
(integer Average truncates, half types scale in float32, narrow integers wrap). Product
runs in submission order instead: the fusion negotiation takes no product."""

import torch

from . import runtime
from ._check import _FUSE_CHECK_BYTES, _Check, _describe, _verify_ordered
from ._handles import (_done, _grouped, _host_buffer, _inflight, _lib, _register, _unnamed, _wait, _wants_grad,
                       synchronize)
from ._ops import (_NARROW_INTS, Product, Sum, _check_op, _dtype_code, _library_op, _postscale, _resolve_op,
                   _scaled)
from ._process_sets import _no_process_set
from .compression import Compression
from .runtime import HorovodInternalError


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, compression, kind="allreduce",
                     check_ranks=True):
    op = _check_op(op)
    comm = runtime.comm()
    if name is None:
        name = _unnamed("allreduce")
    elif name in _inflight:
        raise ValueError(f"allreduce: a tensor named '{name}' is already in flight; synchronize its handle before "
                         "submitting the name again, or give this one another name")
    if op is Product:
        return _product_async(tensor, output, name, prescale_factor, postscale_factor, compression)
    compressed, ctx = compression.compress(tensor)
    if compressed.dtype in _NARROW_INTS:  # reduced as int32, then cast back (wrapping, as Horovod's C++ adds)
        buf = compressed.detach().to("cpu", torch.int32, copy=True).contiguous()
    else:
        buf, _ = _host_buffer(compressed)
        if buf is tensor and output is not tensor:
            buf = buf.clone()
    dtype = _dtype_code(buf, f"allreduce '{name}'")
    if prescale_factor != 1.0:
        with torch.no_grad():
            buf.copy_(_scaled(buf, prescale_factor))
    n = comm.size()
    lib_op = _library_op(op, buf)
    check = None
    if n > 1 and check_ranks:
        # A small tensor's fingerprint shares its dtype and op, so that the fusion buffer
        # fuses the two; a large one's goes alone (int64): fused, it would cost the large
        # tensor a copy into the fusion buffer and back.
        small = buf.numel() * buf.element_size() <= _FUSE_CHECK_BYTES
        check = _Check(comm, "saker.check/" + name, _describe(kind, name, tensor, op=op),
                       buf.dtype if small else torch.int64, lib_op if small else Sum)
    handle = _lib(comm.enqueue_allreduce, name, buf.data_ptr(), buf.numel(), dtype, lib_op.code, list(tensor.shape))
    _inflight.add(name)

    def finish():
        _inflight.discard(name)
        failure = None
        try:
            _wait(handle)
        except HorovodInternalError as e:
            failure = e
        if check is not None:
            _settle(check, failure)
        if failure is not None:
            raise failure
        result = compression.decompress(_postscale(buf, op, lib_op, n, postscale_factor), ctx)
        if result is not output:
            with torch.no_grad():
                output.copy_(result.view_as(output))
        return output

    return _register([handle] + ([check.handle] if check else []), (buf, tensor, output, check), finish)


def _settle(check, failure):
    """Raise the cross-rank mismatch an allreduce's fingerprint found, on every rank alike;
    failure is the data's own error (None when it arrived)."""
    try:
        agreed = check.agreed(need_all=False)
    except HorovodInternalError as e:
        # The negotiation refused the fingerprint itself (its dtype or op is the
        # data's, and differs): the same on every rank, so they all report.
        if "differs between ranks" not in str(e):
            raise (failure or e) from None  # e.g. a stall: name the tensor, not its fingerprint
        agreed = False
    if not agreed:
        raise check.error()


def _product_async(tensor, output, name, prescale_factor, postscale_factor, compression):
    """Product over ranks: libsaker_comm's prod allreduce, in submission order like a
    broadcast (the fusion negotiation, which matches names, takes no product), after the
    cross-rank check. Integers multiply with wrap-around, as Horovod's C++ does."""
    comm = runtime.comm()
    compressed, ctx = compression.compress(tensor)
    _verify_ordered(_describe("allreduce", name, tensor, op=Product))
    t = _scaled(compressed.detach().to("cpu"), prescale_factor)
    narrow = t.dtype in _NARROW_INTS
    buf = t.to(torch.int32, copy=True).contiguous() if narrow else t.clone().contiguous()
    _lib(comm.allreduce, buf.data_ptr(), buf.numel(), _dtype_code(buf, f"allreduce '{name}'"), Product.code)
    result = _scaled(buf.to(t.dtype) if narrow else buf, postscale_factor)
    result = compression.decompress(result, ctx)
    with torch.no_grad():
        output.copy_(result.view_as(output))
    return _done(output)


class _AllreduceFn(torch.autograd.Function):
    """Horovod's gradient: the allreduce of the gradient with the same op and factors."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.args = (op, prescale_factor, postscale_factor)
        return synchronize(_allreduce_async(tensor, torch.empty_like(tensor), name, op, prescale_factor,
                                            postscale_factor, Compression.none))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post = ctx.args
        return allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post), None, None, None, None



def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, compression=None):
    """Start an allreduce into a new tensor; synchronize(handle) returns it."""
    _no_process_set(process_set)
    output = torch.empty_like(tensor)
    return _allreduce_async(tensor, output, name, _resolve_op(average, op), prescale_factor, postscale_factor,
                            compression or Compression.none)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, compression=None):
    """Start an in-place allreduce of tensor; synchronize(handle) returns it."""
    _no_process_set(process_set)
    return _allreduce_async(tensor, tensor, name, _resolve_op(average, op), prescale_factor, postscale_factor,
                            compression or Compression.none)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Reduce tensor over all ranks (default: Average) into a new tensor; differentiable."""
    _no_process_set(process_set)
    op = _resolve_op(average, op)
    compression = compression or Compression.none
    if _wants_grad(tensor):
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(_AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor),
                                      ctx)
    return synchronize(allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, process_set,
                                       compression))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """Reduce tensor over all ranks, in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))



def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    """Start allreduces of a list of tensors as one fusion group; synchronize returns the list."""
    return _grouped(tensors, name, lambda t, n: allreduce_async(t, average, n, op, prescale_factor,
                                                                postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    return _grouped(tensors, name, lambda t, n: allreduce_async_(t, average, n, op, prescale_factor,
                                                                 postscale_factor, process_set))


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, *tensors):
        ctx.args = (op, pre, post)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, pre, post)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post = ctx.args
        return (None, None, None, None) + tuple(grouped_allreduce(list(grads), op=op, prescale_factor=pre,
                                                                  postscale_factor=post))


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    _no_process_set(process_set)
    op = _resolve_op(average, op)
    if _wants_grad(*tensors):
        return list(_GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, *tensors))
    return synchronize(grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                               process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))
