"""A `saker` backend for torch.distributed, registered on import.

    import saker.torch
    torch.distributed.init_process_group("saker")
    model = torch.nn.parallel.DistributedDataParallel(model)

torch 1.13 lets Python subclass its ProcessGroup and Work (pybind11 trampolines), so the
backend is Python over saker._comm: no libtorch build. Collectives run on libsaker_comm's
background thread in submission order (the MPI contract torch.distributed already
imposes); a completion thread resolves each Work's future when its bytes have arrived,
so DDP's bucket allreduces overlap the backward pass as they do on Gloo.

Device (CUDA) tensors, with a CUDA build of torch: allreduce goes to Saker's NCCL path
(enqueued on the caller's current stream, as NCCL's own backend orders it) when
libsaker_comm was built with NCCL and every rank has a GPU of its own; the first CUDA
allreduce decides that, on every rank alike, and where NCCL cannot serve (ranks sharing a
GPU, a build without NCCL) allreduce stages through host memory and rank 0 says why, once.
The other collectives always stage through host memory. Futures of CUDA work are
CUDA-aware (their callbacks wait on the caller's stream). Debian's python3-torch is a
CPU-only build, so there this path never runs; tests/python/backend_gpu_check.py checks it
on a GPU machine.

Rendezvous: under srun (PMI2 or a Slurm step) libsaker_comm's own bootstrap; elsewhere
(saker-run --local, torchrun) rank 0 serves a Saker store and publishes its address in
torch's store, so torch's and Saker's stores never compete for MASTER_PORT.
"""

import atexit
import inspect
import math
import os
import queue
import socket
import sys
import threading
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work

from . import runtime
from .collectives import _DTYPES

_OPS = {dist.ReduceOp.SUM: 0, dist.ReduceOp.MIN: 1, dist.ReduceOp.MAX: 2}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS[dist.ReduceOp.AVG] = 3
_PRODUCT = 4  # allreduce and reduce_scatter only: the fusion negotiation takes no product


def _op_code(op):
    for k, v in _OPS.items():
        if op == k:
            return v
    if op == dist.ReduceOp.PRODUCT:
        return _PRODUCT
    # opts.reduceOp prints as an object: name it by the ops torch knows.
    name = next((k for k in ("BAND", "BOR", "BXOR", "PREMUL_SUM") if hasattr(dist.ReduceOp, k)
                 and op == getattr(dist.ReduceOp, k)), str(op))
    raise RuntimeError(f"the saker backend reduces with SUM, PRODUCT, MIN, MAX and AVG, not {name}; "
                       "use the gloo backend for bitwise ops")


def _dtype_code(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise RuntimeError(f"the saker backend reduces float32/float64/float16/bfloat16/int32/int64 tensors, "
                           f"not {t.dtype}") from None


def _check_device(tensors, what):
    for t in tensors:
        if t.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"the saker backend's {what} takes CPU or CUDA tensors, not {t.device}")


class _Staged:
    """A contiguous host buffer for tensor t, and how to put the result back. CUDA tensors
    are copied out on their current stream (synchronously) and back on that same stream,
    from whichever thread completes the Work, so the caller's later kernels see it."""

    def __init__(self, t):
        self.tensor = t
        if t.device.type == "cuda":
            self.stream = torch.cuda.current_stream(t.device)
            self.buf = t.detach().to("cpu").contiguous()
        else:
            self.stream = None
            self.buf = t if t.is_contiguous() else t.contiguous()

    def restore(self, result=None):
        src = self.buf if result is None else result
        if src is self.tensor:
            return
        if self.stream is None:
            self.tensor.copy_(src)
            return
        with torch.cuda.stream(self.stream):
            self.tensor.copy_(src, non_blocking=False)


def _cuda_stream_of(tensors):
    """The caller's current stream when the collective's tensors live on a GPU, else None."""
    for t in tensors or ():
        if isinstance(t, (list, tuple)):  # all_gather's output: one list per input
            s = _cuda_stream_of(t)
            if s is not None:
                return s
        elif isinstance(t, torch.Tensor) and t.device.type == "cuda":
            return torch.cuda.current_stream(t.device)
    return None


class _Work(Work):
    """A pending collective: its future completes once the result is in the caller's
    tensors, from the completion thread or from wait(), whichever comes first. wait() waits
    on the library's handle itself: through the completion thread each synchronous call
    paid one more thread hand-off, a time slice on a busy CPU. For CUDA tensors the future
    is CUDA-aware and is completed inside the caller's stream, so what DDP chains on it
    waits for the copy back (torch refuses a CUDA result otherwise)."""

    def __init__(self, result):
        super().__init__()
        self._stream = _cuda_stream_of(result)
        self._future = torch.futures.Future(devices=[self._stream.device] if self._stream is not None else None)
        self._result = result
        self._done = threading.Event()
        self._error = None
        self._bound = False  # by _Completer.submit: a handle to wait and what to run after it
        self._handle = self._after = None
        self._finishing = threading.Lock()  # after() and _complete() run once, by one thread

    def _bind(self, handle, after):
        self._handle, self._after, self._bound = handle, after, True

    def _finish(self):
        """Waits for the library's handle, then copies the result back and completes the
        future, once, whichever thread gets there first; the other returns when it is done."""
        error = None
        try:
            if self._handle is not None:
                self._handle.wait()  # releases the GIL; any number of threads may wait
        except Exception as e:  # the Work carries it to whoever waits
            error = RuntimeError(str(e))
        with self._finishing:
            if self._done.is_set():
                return
            if error is None and self._after is not None:
                try:
                    self._after()
                except Exception as e:
                    error = RuntimeError(str(e))
            self._complete(error)

    def _complete(self, error=None):
        self._error = error
        self._done.set()
        if error is not None:
            self._future.set_exception(error)
        elif self._stream is None:
            self._future.set_result(self._result)
        else:
            with torch.cuda.stream(self._stream):
                self._future.set_result(self._result)

    def wait(self, timeout=timedelta(0)):
        if self._done.is_set():
            pass
        elif self._bound:
            self._finish()  # beside the completion thread: whichever gets there first finishes it
        else:
            self._done.wait()
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        return self._future

    def result(self):
        return self._result


class _Completer:
    """One thread per process group: waits each handle in submission order (the order the
    library runs them) and finishes its Work. Stopped before the interpreter finalizes:
    a daemon thread that wakes up during finalization is ended with pthread_exit, and one
    ended inside a call that released the GIL (handle.wait) unwinds through C++ frames
    that may not be unwound, which aborts the process ('terminate called without an
    active exception') after the script itself has succeeded."""

    _all = weakref.WeakSet()

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="saker-pg-completion", daemon=True)
        self._thread.start()
        _Completer._all.add(self)

    def submit(self, handle, work, after=None, keep=None):
        """keep: buffers the library reads or writes until handle completes (staged
        copies nobody else references), held here until then."""
        work._bind(handle, after)
        self._queue.put((work, keep))
        return work

    def stop(self):
        """Finishes the queued work, then ends the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    @staticmethod
    @atexit.register
    def _stop_all():
        for c in list(_Completer._all):
            c.stop()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, keep = item
            work._finish()
            del keep  # the staged buffers live until the library is done with them


class SakerProcessGroup(ProcessGroup):
    """torch.distributed's ProcessGroup over a saker._comm.Communicator."""

    def __init__(self, comm):
        super().__init__(comm.rank(), comm.size())
        self._comm = comm
        self._done = _Completer()
        self._device_path = None  # "nccl" or "host: why", set by the first CUDA allreduce

    def getBackendName(self):
        return "saker"

    def name(self):
        return "saker"

    def _one(self, tensors, what):
        _check_device(tensors, what)
        if len(tensors) != 1:
            raise RuntimeError(f"the saker backend's {what} takes one tensor per rank (got {len(tensors)})")
        return tensors[0]

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "allreduce")
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if t.device.type == "cuda" and self.device_path() == "nccl":
            return self._allreduce_nccl(t, tensors, op)
        s = _Staged(t)
        h = self._comm.allreduce_async(s.buf.data_ptr(), s.buf.numel(), _dtype_code(s.buf), op)
        return self._done.submit(h, _Work(tensors), s.restore)

    def device_path(self):
        """How CUDA tensors are allreduced: "nccl", or "host: <why not NCCL>". Decided at the
        first call, which is collective (every rank's GPU view is exchanged, so all ranks
        decide alike): call it on every rank, or let the first CUDA allreduce do it. The
        library judges every case (no NCCL build, a rank without a GPU, ranks sharing one)
        alike on all ranks, so no rank skips the exchange on its own view."""
        if self._device_path is None:
            try:
                self._comm.nccl_device()
                why = None
            except RuntimeError as e:
                why = str(e)
            self._device_path = "nccl" if why is None else "host: " + why
            if why is not None and self.rank() == 0:
                print(f"saker backend: CUDA tensors are allreduced through host memory, not NCCL: {why}",
                      file=sys.stderr, flush=True)
        return self._device_path

    def _allreduce_nccl(self, t, tensors, op):
        """Saker's NCCL path on the caller's current stream: like NCCL's backend, the Work is
        complete once the kernel is enqueued (completed here, inside that stream, so its
        future's callbacks wait for the kernel), and stream order does the rest."""
        stream = torch.cuda.current_stream(t.device)
        buf = t if t.is_contiguous() else t.contiguous()
        self._comm.allreduce_device(buf.data_ptr(), buf.numel(), _dtype_code(buf), op, stream.cuda_stream)
        if buf is not t:
            t.copy_(buf)
        work = _Work(tensors)
        work._complete()
        return work

    def allreduce_coalesced(self, tensors, opts=None):
        _check_device(tensors, "allreduce_coalesced")
        flat = torch.cat([t.reshape(-1) for t in tensors]).to("cpu")
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        h = self._comm.allreduce_async(flat.data_ptr(), flat.numel(), _dtype_code(flat), op)

        staged = [_Staged(t) for t in tensors]

        def scatter_back():
            offset = 0
            for s in staged:
                s.restore(flat[offset: offset + s.tensor.numel()].view_as(s.tensor))
                offset += s.tensor.numel()
        return self._done.submit(h, _Work(tensors), scatter_back)

    def broadcast(self, tensors, opts=None):
        s = _Staged(self._one(tensors, "broadcast"))
        root = opts.rootRank if opts is not None else 0
        h = self._comm.broadcast_async(s.buf.data_ptr(), s.buf.numel() * s.buf.element_size(), root)
        return self._done.submit(h, _Work(tensors), s.restore)

    def allgather(self, output_tensors, input_tensors, opts=None):
        buf = _Staged(self._one(input_tensors, "allgather")).buf  # a copy for CUDA or strided input
        outs = output_tensors[0]
        if len(output_tensors) != 1 or len(outs) != self.size():
            raise RuntimeError(f"the saker backend's allgather needs one list of {self.size()} output tensors")
        for o in outs:
            if o.numel() != buf.numel() or o.dtype != buf.dtype:
                raise RuntimeError("allgather: every output tensor must match the input's size and dtype")
        recv = torch.empty((self.size(),) + tuple(buf.shape), dtype=buf.dtype)
        h = self._comm.allgather_async(buf.data_ptr(), recv.data_ptr(), buf.numel() * buf.element_size())

        staged = [_Staged(o) for o in outs]  # checked above; staging only copies CUDA outputs

        def scatter_back():
            for r, s in enumerate(staged):
                s.restore(recv[r].view_as(s.tensor))
        return self._done.submit(h, _Work(output_tensors), scatter_back, keep=(buf, recv))

    def _allgather_base(self, output, input, opts=None):
        _check_device([output, input], "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size() or not output.is_contiguous():
            raise RuntimeError("all_gather_into_tensor: the output must be contiguous and world_size times "
                               "the input's size")
        src, out = _Staged(input), _Staged(output)
        h = self._comm.allgather_async(src.buf.data_ptr(), out.buf.data_ptr(), src.buf.numel() * src.buf.element_size())
        return self._done.submit(h, _Work([output]), out.restore, keep=(src, out))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        # libsaker_comm's reduce-scatter: each rank sends and receives (size-1)/size of
        # the list, and receives only its own tensor's reduction.
        _check_device(output_tensors + input_tensors[0], "reduce_scatter")
        ins = input_tensors[0]
        if len(output_tensors) != 1 or len(ins) != self.size():
            raise RuntimeError(f"the saker backend's reduce_scatter needs one output and a list of {self.size()} inputs")
        flat = torch.cat([t.reshape(-1) for t in ins]).to("cpu")
        return self._reduce_scatter_flat(flat, [t.numel() for t in ins], output_tensors[0], opts, output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        _check_device([output, input], "reduce_scatter_tensor")
        if input.numel() != output.numel() * self.size():
            raise RuntimeError(f"reduce_scatter_tensor: the input must hold world_size ({self.size()}) times the "
                               f"output's {output.numel()} elements, not {input.numel()}")
        src = _Staged(input)
        return self._reduce_scatter_flat(src.buf.reshape(-1), [output.numel()] * self.size(), output, opts, [output],
                                         keep=src)

    def _reduce_scatter_flat(self, flat, counts, output, opts, result, keep=None):
        if output.numel() != counts[self.rank()] or output.dtype != flat.dtype:
            raise RuntimeError(f"reduce_scatter: rank {self.rank()}'s output must hold {counts[self.rank()]} elements of "
                               f"{flat.dtype}, not {output.numel()} of {output.dtype}")
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        out = _Staged(output)
        recv = out.buf if out.buf.is_contiguous() and out.stream is None else torch.empty_like(out.buf)
        h = self._comm.reduce_scatter_async(flat.data_ptr(), recv.data_ptr(), counts, _dtype_code(flat), op)
        after = None if recv is output else (lambda: out.restore(recv.view_as(out.tensor)))
        return self._done.submit(h, _Work(result), after, keep=(flat, recv, keep))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """all_to_all_single: rows of dimension 0, even splits when none are given. The
        library checks dtype, row size and every pair's counts across ranks first."""
        _check_device([output, input], "all_to_all_single")
        n = self.size()
        ins = input_split_sizes or [input.shape[0] // n] * n if input.dim() else None
        outs = output_split_sizes or [output.shape[0] // n] * n if output.dim() else None
        if ins is None or outs is None or len(ins) != n or len(outs) != n or sum(ins) != input.shape[0] \
                or sum(outs) != output.shape[0] or input.shape[1:] != output.shape[1:]:
            raise RuntimeError(f"all_to_all_single: split sizes {list(ins or [])} / {list(outs or [])} must be {n} "
                               f"counts that add up to the input's / output's first dimension, and the rows must match")
        src, dst = _Staged(input), _Staged(output)
        row = math.prod(input.shape[1:])
        h = self._comm.alltoallv_async(src.buf.data_ptr(), list(ins), dst.buf.data_ptr(), list(outs), row,
                                       _dtype_code(src.buf))
        return self._done.submit(h, _Work([output]), dst.restore, keep=(src, dst))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        """all_to_all: input_tensors[j] goes to rank j, output_tensors[j] comes from rank j."""
        _check_device(output_tensors + input_tensors, "all_to_all")
        n = self.size()
        if len(input_tensors) != n or len(output_tensors) != n:
            raise RuntimeError(f"all_to_all: needs {n} input and {n} output tensors")
        flat = torch.cat([t.reshape(-1).to("cpu") for t in input_tensors])
        recv = torch.empty(sum(t.numel() for t in output_tensors), dtype=flat.dtype)
        h = self._comm.alltoallv_async(flat.data_ptr(), [t.numel() for t in input_tensors], recv.data_ptr(),
                                       [t.numel() for t in output_tensors], 1, _dtype_code(flat))
        staged = [_Staged(t) for t in output_tensors]

        def scatter_back():
            offset = 0
            for s in staged:
                s.restore(recv[offset: offset + s.tensor.numel()].view_as(s.tensor))
                offset += s.tensor.numel()
        return self._done.submit(h, _Work(output_tensors), scatter_back, keep=(flat, recv))

    def barrier(self, opts=None):
        return self._done.submit(self._comm.barrier_async(), _Work(None))


def _bootstrap_over(store, rank, size, timeout):
    """A Communicator whose rendezvous is a Saker store that rank 0 serves; its address
    travels through torch's store (which has already been set up by the launcher).
    Only the address does: torch's store is readable by anyone who reaches its port, so
    the job key that the Saker store and every link prove comes from each rank's own
    environment (SAKER_JOB_KEY, which saker-run sets, or SAKER_JOB_KEY_FILE)."""
    from saker import _comm as ext
    key = "saker/store"
    server = None
    if rank == 0:
        server = ext.TcpStoreServer(0)
        host = os.environ.get("SAKER_COMM_ADDR") or os.environ.get("MASTER_ADDR") or socket.gethostname()
        store.set(key, f"{host}:{server.port()}")
    addr = store.get(key).decode()
    host, port = addr.rsplit(":", 1)
    comm = ext.Communicator.over_tcp_store(host, int(port), rank, size, runtime.node_identity(),
                                           socket.gethostname(), timeout.total_seconds())
    return comm, server


def _slurm_bootstrap():
    """libsaker_comm bootstraps itself here (PMI2, or a Slurm step's own store)."""
    env = os.environ
    return bool(env.get("PMI_FD")) or (bool(env.get("SLURM_PROCID")) and bool(env.get("SLURM_STEP_ID"))
                                       and not env.get("SAKER_STORE"))


_servers = []  # Saker stores served by this process (rank 0), alive as long as it runs


def _create(store, rank, size, timeout):
    if runtime.is_initialized():
        comm = runtime.comm()
    elif _slurm_bootstrap():
        from saker import _comm as ext
        comm = ext.Communicator.from_environment(timeout.total_seconds())
    else:
        comm, server = _bootstrap_over(store, rank, size, timeout)
        if server is not None:
            _servers.append(server)
    if comm.rank() != rank or comm.size() != size:
        raise RuntimeError(f"saker backend: torch.distributed says rank {rank} of {size}, but Saker's bootstrap "
                           f"says rank {comm.rank()} of {comm.size()}; launch with saker-run (or let both read "
                           "the same RANK/WORLD_SIZE)")
    if not runtime.is_initialized():
        runtime.adopt(comm)  # hvd-style calls in the same script share the communicator
    return SakerProcessGroup(comm)


def register():
    """Make init_process_group("saker") create a SakerProcessGroup (once per process)."""
    if getattr(dist.Backend, "SAKER", None) is None:
        # torch 2.x asks which devices a backend serves (and warns when not told).
        if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
            dist.Backend.register_backend("saker", _create, devices=["cpu", "cuda"])
        else:
            dist.Backend.register_backend("saker", _create)
