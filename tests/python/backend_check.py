"""The torch.distributed 'saker' backend, collective by collective (run under
saker-run --local -n N): every call against the value the semantics fix, contiguous and
not, sync and async, and the refusals (ops, dtypes, devices it cannot serve) naming what
to use instead. DDP over it is checked by examples/torch/train_ddp.py."""

import datetime
import threading
import time

import torch
import torch.distributed as dist

import saker.torch  # noqa: F401  (registers the backend)


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def expect_error(words, fn):
    try:
        fn()
    except (RuntimeError, ValueError, TypeError) as e:
        check(all(w in str(e) for w in words), f"error names {words}: {e}")
        return
    raise AssertionError(f"rank {dist.get_rank()}: expected an error mentioning {words}")


dist.init_process_group("saker", timeout=datetime.timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
check(dist.get_backend() == "saker", f"backend is saker, not {dist.get_backend()}")
total = n * (n + 1) / 2

for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
    x = torch.full((7,), r + 1, dtype=dtype)
    dist.all_reduce(x)
    check(torch.equal(x, torch.full((7,), total, dtype=dtype)), f"all_reduce SUM {dtype}")
for op, want in ((dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, float(n))):
    x = torch.full((3,), float(r + 1))
    dist.all_reduce(x, op=op)
    check(torch.equal(x, torch.full((3,), want)), f"all_reduce {op}")
if hasattr(dist.ReduceOp, "AVG"):
    x = torch.full((3,), float(r + 1))
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    check(torch.allclose(x, torch.full((3,), total / n)), "all_reduce AVG")

strided = (torch.arange(12.0).view(3, 4) * (r + 1)).t()  # not contiguous
check(not strided.is_contiguous(), "the test tensor is strided")
dist.all_reduce(strided)
check(torch.equal(strided, (torch.arange(12.0).view(3, 4) * total).t()), "all_reduce of a non-contiguous view")

work = dist.all_reduce(torch.ones(1000) * r, async_op=True)
fut = work.get_future()
work.wait()
check(work.is_completed() and work.is_success(), "async work completes")
check(torch.equal(fut.wait()[0], torch.full((1000,), n * (n - 1) / 2)), "the future carries the result")



class _HeldCompleter:
    """Stands in the completion thread's queue and holds it until released (or 60 s)."""

    def __init__(self):
        self.release, self.timed_out = threading.Event(), False

    def _finish(self):
        self.timed_out = not self.release.wait(60)


# A synchronous call finishes in the caller's wait(), not through the completion thread
# (one thread hand-off less). Checked with that thread held: the calls must return, with
# their results and completed futures, before it is released.
held = _HeldCompleter()
dist.distributed_c10d._get_default_group()._done._queue.put((held, None))
x = torch.full((6,), float(r + 1))
w = dist.all_reduce(x, async_op=True)
w.wait()
a2a = torch.empty(2 * n)
dist.all_to_all_single(a2a, torch.arange(2.0 * n) + 100 * r)
check(not held.timed_out, "the synchronous calls returned while the completion thread was held")
check(torch.equal(x, torch.full((6,), total)) and w.get_future().done(), "all_reduce finished by wait()")
check(torch.equal(a2a, torch.tensor([100.0 * k + c for k in range(n) for c in (2 * r, 2 * r + 1)])),
      "all_to_all_single finished by wait()")
held.release.set()

b = torch.full((5,), float(r))
dist.broadcast(b, src=n - 1)
check(torch.equal(b, torch.full((5,), float(n - 1))), "broadcast from the last rank")
bs = torch.arange(10.0).view(2, 5).t().clone().t() * (r + 1)  # a strided view again
dist.broadcast(bs, src=0)
check(torch.equal(bs, torch.arange(10.0).view(2, 5)), "broadcast into a non-contiguous tensor")

outs = [torch.empty(2, 3) for _ in range(n)]
dist.all_gather(outs, torch.full((2, 3), float(r)))
check(all(torch.equal(o, torch.full((2, 3), float(k))) for k, o in enumerate(outs)), "all_gather")
# A strided (or CUDA) input is staged into a copy only the backend holds: it must stay
# alive until the library has sent it, however the caller's memory churns meanwhile.
big = torch.arange(1 << 20, dtype=torch.float64).view(1024, 1024).t() + r  # 8 MiB, strided
big_outs = [torch.empty(1024, 1024, dtype=torch.float64) for _ in range(n)]
work = dist.all_gather(big_outs, big, async_op=True)
del big
churn = [torch.full((1 << 20,), -1.0, dtype=torch.float64) for _ in range(4)]
work.wait()
want = torch.arange(1 << 20, dtype=torch.float64).view(1024, 1024).t()
check(all(torch.equal(o, want + k) for k, o in enumerate(big_outs)), "async all_gather of a staged (strided) input")
del churn, big_outs
flat = torch.empty(n * 4, dtype=torch.int64)
gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
gather_base(flat, torch.full((4,), r, dtype=torch.int64))
check(torch.equal(flat, torch.arange(n).repeat_interleave(4)), "all_gather_into_tensor")

ins = [torch.full((3,), float(r + 10 * k)) for k in range(n)]
out = torch.empty(3)
dist.reduce_scatter(out, ins)
check(torch.equal(out, torch.full((3,), total - n + 10.0 * r * n)), "reduce_scatter keeps this rank's reduced slice")
dist.barrier()

expect_error(["BAND", "gloo"], lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND))
expect_error(["torch.uint8"], lambda: dist.all_reduce(torch.ones(2, dtype=torch.uint8)))
expect_error(["meta"], lambda: dist.all_reduce(torch.ones(2, device="meta")))
expect_error(["one list of"], lambda: dist.all_gather([torch.empty(1)], torch.ones(1)) if n > 1 else
             (_ for _ in ()).throw(RuntimeError("one list of (n=1)")))
dist.barrier()  # the refusals left the communicator usable

# NCCL's own refusal (no GPU here; elsewhere ranks that share one) reaches every rank
# alike, and host collectives go on working after it (the backend falls back to them).
pg = dist.distributed_c10d._get_default_group()
try:
    pg._comm.nccl_device()
    refused = None
except RuntimeError as e:
    refused = str(e)
if refused is not None:
    check("NCCL" in refused, f"the refusal names NCCL: {refused}")
    x = torch.ones(3)
    dist.all_reduce(x)
    check(torch.equal(x, torch.full((3,), float(n))), "a host allreduce after NCCL's refusal")
    check(pg.device_path().startswith("host: "), f"device_path after a refusal: {pg.device_path()}")

# The script ends with a collective in flight (rank 0 does not wait for it; the others
# join late): the process must finish it and exit 0, not abort while Python finalizes.
late = torch.ones(1 << 20)
if r == 0:
    dist.all_reduce(late, async_op=True)
else:
    time.sleep(1.0)
    dist.all_reduce(late)
print(f"backend ok rank {r}/{n}", flush=True)
