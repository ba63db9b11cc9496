"""Horovod's reduction ops and the dtypes libsaker_comm reduces, and how Horovod scales:
the vocabulary every collective module shares (no state, no communicator)."""

import torch


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
Product = _ReduceOp("Product", 4)  # an ordered allreduce: the fusion negotiation takes no product

_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3, torch.int32: 4, torch.int64: 5}
_HALF = (torch.float16, torch.bfloat16)
_NARROW_INTS = (torch.uint8, torch.int8, torch.int16)


def _check_op(op):
    if op is Adasum:
        raise NotImplementedError("saker.torch does not implement Adasum; use op=saker.torch.Average "
                                  "(and scale the learning rate by size()), which Saker's ring reduces exactly")
    if not isinstance(op, _ReduceOp):
        raise ValueError(f"op={op!r} is not one of saker.torch.Average, Sum, Min, Max, Product")
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
        raise TypeError(f"{what}: saker reduces float32/float64/float16/bfloat16/int32/int64 (and uint8/int8/int16) "
                        f"tensors, not {tensor.dtype}; cast the tensor first") from None


def _scaled(t, factor):
    """t * factor as Horovod scales: integers in float64 then truncated toward zero,
    float16/bfloat16 in float32 then rounded once, other floats in their own type."""
    if factor == 1.0:
        return t
    if not t.is_floating_point():
        return (t.to(torch.float64) * factor).to(t.dtype)
    if t.dtype in _HALF:
        return (t.to(torch.float32) * factor).to(t.dtype)
    return t * factor


def _library_op(op, buf):
    """The op libsaker_comm runs for op on buf: Average itself for float32/float64; for
    integers and half types Sum, which _postscale then scales as Horovod does."""
    if op is Average and not (buf.is_floating_point() and buf.dtype not in _HALF):
        return Sum
    return op


def _postscale(result, op, lib_op, n, factor):
    """The reduction's result scaled by factor, and Average finished where the library summed
    (lib_op is Sum): integers truncate toward zero, half types scale in float32."""
    if op is Average and lib_op is Sum:
        if not result.is_floating_point() and factor == 1.0:
            return torch.div(result, n, rounding_mode="trunc")
        return _scaled(result, factor / n)
    return _scaled(result, factor)
