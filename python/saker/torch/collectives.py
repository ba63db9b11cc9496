"""Horovod's tensor collectives over libsaker_comm.

Allreduces go through Saker's fusion buffer under a name (the caller's, or a counter's
when none is given), so named tensors may be submitted in any order across ranks and a
name some rank never submits shows up in the stall report. Broadcasts, allgathers and
alltoalls run in submission order, as in MPI. Tensors live in host memory; device tensors
are staged through a host copy.

Cross-rank check: before a collective's bytes are trusted, the ranks compare what each
submitted (the collective, name, dtype, shape or its non-ragged part, root, op). Each rank
adds a small fingerprint of its descriptor, [1, h1, h1², h2, h2², ...] for a few short
hashes, to a Sum allreduce under a name of its own in the fusion buffer: the ranks agree
exactly when k·Σh² = (Σh)² for every hash, k being the number of ranks that took part (a
rank that called join() stands in with zeros there, which is how a join during a
broadcast or an allgather is seen). Only on a mismatch do the ranks exchange their
descriptors in full, so that every rank raises the same HorovodInternalError naming the
tensor and each rank's value. The ordered collectives wait for the check (int64, two
15-bit hashes) before their bytes move. An allreduce's fingerprint is enqueued with its
data, which never waits for it; up to 64 KiB of data it takes the
data's own dtype and op where that dtype holds its sums exactly (float32/float64/int32/
int64; three 7-bit hashes; [h, -h] for Min/Max), so that the fusion buffer fuses the two;
a larger or half-precision tensor's fingerprint goes alone (int64: fused, it would cost
the large tensor a copy through the fusion buffer; alone, it costs a 64 MiB allreduce
0.2-0.4 ms, see saker-torch(7)). The fusion negotiation itself already
refuses a different count, dtype, op or shape under one name (each allreduce passes its
tensor's dimensions), so bytes are never reinterpreted and a refused tensor, in place or
not, keeps its values. DistributedOptimizer's gradients carry no fingerprint:
it compares its parameters once, when it is built. The torch.distributed backend does not
run the check (its hot path stays as it was).
"""

import io
import itertools
import json
import math
import pickle
import traceback
import zlib

import torch

from . import runtime
from .runtime import HorovodInternalError


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
_CODES = {op.code: op for op in (Sum, Min, Max, Average)}
_HALF = (torch.float16, torch.bfloat16)
_NARROW_INTS = (torch.uint8, torch.int8, torch.int16)


# ---- compression (here, not in optimizer.py: collectives need it, the optimizer uses it) ----
class Compressor:
    """How a gradient travels: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class FP16Compressor(Compressor):
    """Floating-point gradients travel as float16 and come back in their own dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor


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


def _lib(fn, *args):
    """A libsaker_comm call whose failure (a peer gone, a timeout) is Horovod's HorovodInternalError."""
    try:
        return fn(*args)
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e


def _wait(handle):
    try:
        handle.wait()
    except HorovodInternalError:
        raise
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e


class _Pending:
    """One in-flight operation: the library handle(s), the tensors they write, and what
    synchronize() still has to do (copy back, scale, decompress)."""

    def __init__(self, handles, keep, finish):
        self.handles, self.keep, self.finish = handles, keep, finish


_pending = {}
_next_handle = itertools.count()
_noname = itertools.count()
_ordered = 0  # ordered collectives so far (the same count on every rank): names their checks
_inflight = set()  # allreduce names submitted and not yet synchronized


def _reset():
    """A new communicator starts with fresh counters (every rank's shutdown() runs this)."""
    global _noname, _ordered
    # Each entry lets go of its library handles before its buffers (attribute order), so
    # that a handle which keeps the communicator alive is gone before what it writes into.
    for p in list(_pending.values()):
        p.handles = []
    _pending.clear()
    _inflight.clear()
    _deferred.clear()
    _noname = itertools.count()
    _ordered = 0


runtime._on_shutdown.append(_reset)


def _register(handles, keep, finish):
    h = next(_next_handle)
    _pending[h] = _Pending(handles, keep, finish)
    return h


class _Deferred:
    """An async ordered collective (broadcast, allgather, alltoall, reducescatter) that has
    not started yet. Horovod's async calls return at once and match the ranks' operations by
    name; Saker's ordered collectives must start in the same order on every rank, and their
    start waits for the other ranks. So an async one starts when its handle is polled or
    synchronized (or a later one's is), every earlier one first, in submission order: the
    calling thread never waits at submission, and a name submitted twice before its handle
    is synchronized is refused there (ValueError), as in Horovod."""

    def __init__(self, name, start):
        self.name, self.start, self.started = name, start, None


_deferred = []  # _Deferred not started yet, in submission order


def _defer(kind, name, start):
    if name is not None:
        if name in _inflight:
            raise ValueError(f"{kind}: a tensor named '{name}' is already in flight; synchronize its handle "
                             "before submitting the name again, or give this one another name")
        _inflight.add(name)
    d = _Deferred(name, start)
    _deferred.append(d)
    return _register([], d, lambda: _finish_deferred(d))


def _start_through(d):
    """Start the deferred collectives submitted up to d, in submission order."""
    while d.started is None and _deferred:
        e = _deferred.pop(0)
        try:
            e.started = _pending.pop(e.start())
        except Exception as err:  # noqa: BLE001 - raised by this one's synchronize
            # Kept for synchronize without its frames' locals: they hold the communicator,
            # and through this cycle (e -> err -> traceback -> frame -> e) it would outlive
            # shutdown() until Python's garbage collector ran, on one rank at a time. Its
            # teardown is collective, so that rank then waited for ever for the others, with
            # the GIL held (Horovod's suite: test_async_sparse_allreduce hung after the
            # error tests).
            traceback.clear_frames(err.__traceback__)
            e.started = err


def _finish_deferred(d):
    try:
        _start_through(d)
        if isinstance(d.started, Exception):
            raise d.started
        return d.started.finish()
    finally:
        _inflight.discard(d.name)


def _done(value):
    """A handle whose operation already finished."""
    return _register([], None, lambda: value)


def _host_buffer(tensor):
    """A contiguous host tensor the library may read and write, and whether it is a copy."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        return tensor, False
    return tensor.detach().to("cpu", copy=True).contiguous(), True


# ---- the cross-rank check ----
_ROW = 64  # int64 words per rank in a mismatch report (512 bytes of JSON)
_FUSE_CHECK_BYTES = 64 << 10  # up to this size an allreduce's fingerprint is fused with its data


def _describe(kind, name, tensor, root=None, op=None, ragged=False):
    return {"kind": kind, "name": name or "", "dtype": str(tensor.dtype).replace("torch.", ""),
            "shape": list(tensor.shape), "root": root, "op": op.name if op is not None else None, "ragged": ragged}


_FINGERPRINTS = {}  # descriptor key -> hashes (a step's gradients repeat the same descriptors)


def _hashes(desc, bits, count):
    shape = desc["shape"]
    key = (desc["kind"], desc["name"], desc["dtype"], tuple(shape[1:] if desc["ragged"] else shape),
           len(shape), desc["root"], desc["op"], desc.get("model"), bits, count)
    got = _FINGERPRINTS.get(key)
    if got is None:
        if len(_FINGERPRINTS) > 10000:
            _FINGERPRINTS.clear()
        raw = json.dumps(key[:8]).encode()
        got = _FINGERPRINTS[key] = [zlib.crc32(bytes([i]) + raw) & ((1 << bits) - 1) for i in range(count)]
    return got


class _Check:
    """A fingerprint in flight (see the module's docstring). By default an int64 Sum with two
    15-bit hashes. An allreduce's fingerprint takes its data's dtype and op instead
    (float32/float64/int32/int64), so that the fusion buffer fuses it with the data: three
    7-bit hashes then, whose sums every such dtype holds exactly (Average is undone by
    multiplying by size()); for Min and Max the fingerprint is [h, -h] per hash, and the
    ranks agree when max(h) = min(h)."""

    @staticmethod
    def fuses(dtype, n):
        """Whether an allreduce of dtype on n ranks has a fingerprint of its own dtype and op."""
        return dtype in (torch.float32, torch.float64, torch.int32, torch.int64) and n <= 256

    def __init__(self, comm, tag, desc, dtype=torch.int64, op=None, extra=None):
        self.comm, self.tag, self.desc = comm, tag, desc
        self.op = op if op is not None else Sum
        n = comm.size()
        small = dtype in (torch.float32, torch.float64, torch.int32) or self.op in (Min, Max)
        if not self.fuses(dtype, n):
            dtype, self.op, small = torch.int64, Sum, False
        hs = _hashes(desc, 7 if small else 15, 3 if small else 2)
        if self.op in (Min, Max):
            vals = [v for h in hs for v in (h, -h)]
        else:
            vals = [1] + [v for h in hs for v in (h, h * h)]
        self.width = len(vals)
        self.vec = torch.tensor(vals, dtype=dtype)
        if extra is not None:  # int64 values summed over the ranks in the same round (an int64 Sum check)
            self.vec = torch.cat([self.vec, extra.reshape(-1)])
        self.handle = _lib(comm.enqueue_allreduce, tag, self.vec.data_ptr(), self.vec.numel(), _DTYPES[dtype],
                           self.op.code)

    def extra(self):
        """The extra values, summed over the ranks (after agreed())."""
        return self.vec[self.width:]

    def agreed(self, need_all):
        _wait(self.handle)
        n = self.comm.size()
        v = self.vec[: self.width].tolist()
        if self.op in (Min, Max):  # an allreduce's check: joined ranks are invisible, which is fine there
            return all(v[i] == -v[i + 1] for i in range(0, len(v), 2))
        if self.op is Average:
            v = [x * n for x in v]
        v = [int(round(x)) for x in v]
        k = v[0]
        return all(k * v[i + 1] == v[i] * v[i] for i in range(1, len(v), 2)) and (k == n or not need_all)

    def error(self):
        """Collective among the ranks that took part: each rank's descriptor, then one message."""
        n = self.comm.size()
        raw = json.dumps(self.desc).encode()
        if len(raw) > 8 * _ROW:
            short = dict(self.desc, name=self.desc["name"][:64] + "...")
            raw = json.dumps(short).encode()[: 8 * _ROW]
        table = torch.zeros(n, _ROW, dtype=torch.int64)
        row = torch.zeros(8 * _ROW, dtype=torch.uint8)
        row[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        table[self.comm.rank()] = row.view(torch.int64)
        h = _lib(self.comm.enqueue_allreduce, self.tag + "#report", table.data_ptr(), table.numel(),
                 _DTYPES[torch.int64], Sum.code)
        _wait(h)
        rows = []
        for r in range(n):
            b = table[r].view(torch.uint8).numpy().tobytes().rstrip(b"\0")
            try:
                rows.append(json.loads(b.decode()) if b else None)
            except ValueError:
                rows.append({"kind": "?", "name": "?", "dtype": "?", "shape": "?", "root": None, "op": None,
                             "ragged": False})
        return HorovodInternalError(_mismatch_message(rows))


def _mismatch_message(rows):
    present = [(r, d) for r, d in enumerate(rows) if d is not None]
    joined = [r for r, d in enumerate(rows) if d is None]
    first = present[0][1]
    names = sorted({d["name"] for _, d in present})
    kinds = sorted({d["kind"] for _, d in present})
    what = kinds[0] if len(kinds) == 1 else "collective"
    if len(names) == 1 and names[0]:
        what += f" of tensor '{names[0]}'"
    if joined:
        return (f"{what}: rank(s) {', '.join(map(str, joined))} called join(), and a {first['kind']} needs every "
                f"rank (only allreduces are stood in for after join()); call it before join() on every rank")

    def field(d, f):
        if f == "shape" and d["ragged"]:
            return f"{d['shape']} (dimension 0 may differ)"
        return d.get(f)

    parts = []
    for f in ("kind", "name", "dtype", "shape", "root", "op", "model"):
        if f == "shape":
            keys = {(len(d["shape"]), json.dumps(d["shape"][1:] if d["ragged"] else d["shape"])) for _, d in present}
        else:
            keys = {json.dumps(d.get(f)) for _, d in present}
        if len(keys) > 1:
            parts.append(f"{f} differs: " + ", ".join(f"rank {r} {field(d, f)}" for r, d in present))
    if not parts:  # the 30-bit fingerprint differed while the descriptors agree: say so
        parts.append("the ranks' descriptors differ in what was cut from this report")
    return (f"{what}: the ranks disagree ({'; '.join(parts)}); every rank must submit the same collective with the "
            "same name, dtype, shape, root and op")


def _verify_ordered(desc, extra=None):
    """Before an ordered collective (broadcast, allgather, alltoall): every rank submits the
    same one, and every rank is there (none has called join()). Raises on every rank alike.
    extra (int64), when given, is summed over the ranks in the same round and returned."""
    global _ordered
    comm = runtime.comm()
    if comm.size() == 1:
        return extra
    tag = f"saker.check/ordered.{_ordered}"
    _ordered += 1
    check = _Check(comm, tag, desc, extra=extra)
    if not check.agreed(need_all=True):
        raise check.error()
    return check.extra() if extra is not None else None


# ---- allreduce ----
def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, compression, kind="allreduce",
                     check_ranks=True):
    op = _check_op(op)
    comm = runtime.comm()
    if name is None:
        name = f"allreduce.noname.{next(_noname)}"
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
    # Average: the library averages float32/float64 itself; integers and half types are
    # summed and then scaled as Horovod does (truncation toward zero; fp32 math for fp16).
    native_avg = op is Average and buf.is_floating_point() and buf.dtype not in _HALF
    code = Sum.code if (op is Average and not native_avg) else op.code
    check = None
    if n > 1 and check_ranks:
        # A small tensor's fingerprint shares its dtype and op, so that the fusion buffer
        # fuses the two; a large one's goes alone (int64): fused, it would cost the large
        # tensor a copy into the fusion buffer and back.
        small = buf.numel() * buf.element_size() <= _FUSE_CHECK_BYTES
        check = _Check(comm, "saker.check/" + name, _describe(kind, name, tensor, op=op),
                       buf.dtype if small else torch.int64, _CODES[code] if small else Sum)
    handle = _lib(comm.enqueue_allreduce, name, buf.data_ptr(), buf.numel(), dtype, code, list(tensor.shape))
    _inflight.add(name)

    def finish():
        _inflight.discard(name)
        failure = None
        try:
            _wait(handle)
        except HorovodInternalError as e:
            failure = e
        if check is not None:
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
        if failure is not None:
            raise failure
        result = buf
        if op is Average and not native_avg:
            if not result.is_floating_point() and postscale_factor == 1.0:
                result = torch.div(result, n, rounding_mode="trunc")
            else:
                result = _scaled(result, postscale_factor / n)
        elif postscale_factor != 1.0:
            result = _scaled(result, postscale_factor)
        result = compression.decompress(result, ctx)
        if result is not output:
            with torch.no_grad():
                output.copy_(result.view_as(output))
        return output

    return _register([handle] + ([check.handle] if check else []), (buf, tensor, output, check), finish)


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


def _wants_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


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


def _grouped(tensors, name, start, what="grouped_allreduce"):
    base = name if name is not None else f"{what}.noname.{next(_noname)}"
    handles = [start(t, f"{base}.{i}") for i, t in enumerate(tensors)]
    inner = [_pending.pop(h) for h in handles]

    def finish():  # every member finishes (and frees its name) before the first error is raised
        results, failure = [], None
        for p in inner:
            try:
                results.append(p.finish())
            except Exception as e:  # noqa: BLE001 - re-raised below
                failure = failure or e
        if failure is not None:
            raise failure
        return results

    return _register([x for p in inner for x in p.handles], inner, finish)


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


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Horovod's allreduce of a sparse COO tensor: every rank's indices and values are
    gathered (duplicates are summed when the result is coalesced); Average divides the
    values by size(). synchronize(handle) returns the sparse result."""
    _no_process_set(process_set)
    op = _check_op(op)
    if op not in (Sum, Average):
        raise ValueError(f"sparse_allreduce_async: op {op!r} is not Sum or Average")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather(t.indices().t().contiguous(), name=f"{name}.indices")
    values = allgather(t.values(), name=f"{name}.values")
    if op is Average:
        values = values / runtime.size()
    return _CallableHandle(_done(torch.sparse_coo_tensor(indices.t(), values, t.size())))


class _CallableHandle(int):
    """A handle that synchronize() takes, and that is also callable for the result: Horovod's
    sparse_allreduce_async returns a function."""

    def __call__(self):
        return synchronize(int(self))


def poll(handle):
    """True when the operation behind handle finished (synchronize will not block)."""
    p = _pending.get(handle)
    if p is not None and isinstance(p.keep, _Deferred):
        if p.keep.started is None:  # not started until now, so not done when polled: start it
            _start_through(p.keep)
            return False
        started = p.keep.started
        return not isinstance(started, _Pending) or all(h.done() for h in started.handles)
    return p is None or all(h.done() for h in p.handles)


def synchronize(handle):
    """Wait for an async operation and return its output (None for an unknown handle, as
    in Horovod). A failed collective raises HorovodInternalError."""
    p = _pending.pop(handle, None)
    if p is None:
        return None
    return p.finish()


# ---- broadcast ----
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


# ---- allgather ----
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
    base = name if name is not None else f"grouped_allgather.noname.{next(_noname)}"
    return [allgather(t, f"{base}.{i}") for i, t in enumerate(tensors)]


# ---- alltoall (libsaker_comm's alltoallv: every pair of ranks exchanges its rows directly) ----
def _even_split(rows, n):
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


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


# ---- reducescatter (libsaker_comm's reduce_scatter: the first half of a ring allreduce) ----
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
        name = f"reducescatter.noname.{next(_noname)}"
    _verify_ordered(_describe("reducescatter", name, tensor, op=op))
    t = tensor.detach().to("cpu")
    narrow = t.dtype in _NARROW_INTS
    buf = t.to(torch.int32) if narrow else t
    buf = _scaled(buf, prescale_factor).contiguous()
    dtype = _dtype_code(buf, f"reducescatter '{name}'")
    sizes = _even_split(t.shape[0], n)
    row = math.prod(t.shape[1:])
    out = torch.empty((sizes[me],) + tuple(t.shape[1:]), dtype=buf.dtype)
    # Average: the library averages float32/float64 itself; integers and half types are
    # summed, then scaled as Horovod does (truncation toward zero; fp32 math for fp16).
    native_avg = op is Average and buf.is_floating_point() and buf.dtype not in _HALF
    code = Sum.code if (op is Average and not native_avg) else op.code
    _lib(comm.reduce_scatter, buf.data_ptr(), out.data_ptr(), [s * row for s in sizes], dtype, code, name)
    result = out
    if op is Average and not native_avg:
        if not result.is_floating_point() and postscale_factor == 1.0:
            result = torch.div(result, n, rounding_mode="trunc")
        else:
            result = _scaled(result, postscale_factor / n)
    elif postscale_factor != 1.0:
        result = _scaled(result, postscale_factor)
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
    base = name if name is not None else f"grouped_reducescatter.noname.{next(_noname)}"
    return [reducescatter(t, f"{base}.{i}", compression, op, None, prescale_factor, postscale_factor)
            for i, t in enumerate(tensors)]


# ---- objects, barrier, join ----
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


def allgather_object(obj, name=None, process_set=None):
    """Every rank's picklable object, as a list in rank order."""
    _no_process_set(process_set)
    _verify_ordered({"kind": "allgather_object", "name": name or "", "dtype": "object", "shape": [],
                     "root": None, "op": None, "ragged": False})
    return [pickle.loads(b) for b in _allgather_bytes(pickle.dumps(obj))]


def barrier(process_set=None):
    _no_process_set(process_set)
    try:
        runtime.comm().barrier()
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e


def join(device=-1):
    """Horovod's join: this rank ran out of data. Until every rank has joined, it stands in
    for each named allreduce the others run (DistributedOptimizer's gradients, allreduce
    with or without a name), contributing zeros (Average still divides by size()), or the
    type's largest/lowest value for Min/Max. Returns the rank that joined last. A
    broadcast, allgather or alltoall that the other ranks run meanwhile raises on them
    (they need every rank). device is accepted for Horovod compatibility (tensors are
    staged through host memory)."""
    global _ordered
    if not isinstance(device, int):
        raise TypeError(f"join(device={device!r}): device is a CUDA device index or -1")
    comm = runtime.comm()
    try:
        last = comm.join()
        # Ranks that raised on an ordered collective while this one had joined counted it:
        # agree on the highest count again, so that the next checks meet under one name.
        seq = torch.tensor([_ordered], dtype=torch.int64)
        comm.allreduce(seq.data_ptr(), 1, _DTYPES[torch.int64], Max.code)
        _ordered = int(seq)
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e
    return last


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
