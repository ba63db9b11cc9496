"""The handles of saker.torch's operations and the order they start in: what an async call
returns, what synchronize() and poll() do with it, and the async ordered collectives
(broadcast, allgather, alltoall, reducescatter) that start in submission order on every
rank. Also the two ways a libsaker_comm failure becomes Horovod's HorovodInternalError."""

import itertools
import traceback

import torch

from . import runtime
from .runtime import HorovodInternalError


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
_inflight = set()  # allreduce names submitted and not yet synchronized


def _reset():
    """A new communicator starts with fresh counters (every rank's shutdown() runs this)."""
    global _noname
    # Each entry lets go of its library handles before its buffers (attribute order), so
    # that a handle which keeps the communicator alive is gone before what it writes into.
    for p in list(_pending.values()):
        p.handles = []
    _pending.clear()
    _inflight.clear()
    _deferred.clear()
    _noname = itertools.count()


runtime._on_shutdown.append(_reset)


def _unnamed(kind):
    """A name for an operation submitted without one: the same sequence on every rank."""
    return f"{kind}.noname.{next(_noname)}"


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


def _wants_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _grouped(tensors, name, start, what="grouped_allreduce"):
    base = name if name is not None else _unnamed(what)
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
