"""Replicas stay bitwise identical: every rank receives the same bits from an allreduce,
whatever the dtype's rounding (run under saker-run --local -n N, N >= 2; the caller
picks the transport with SAKER_COMM_TRANSPORT).

Horovod's suite gives every rank the same tensor, so a sum whose rounding depends on the
order of its terms (fp16, bf16, fp32) cannot show a rank that added in another order: here
each rank's values differ and span several binades, so a chunk reduced in another order
on one rank, or a chunk owner's partial sum that others recompute, changes the last bit.
Sizes: 33 elements (fused with its cross-rank fingerprint), 48 Ki elements (the fusion
buffer with others, grouped) and 1.5 Mi elements (a ring/shm transfer of many chunks, an
element count that no rank count divides evenly).

    hvd_replica_check.py        prints "replica ok rank R/N TRANSPORT" at the end; any
                                rank that differs raises, on every rank alike
"""

import hashlib
import os
import sys

import torch

import saker.torch as hvd

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SIZES = (33, 48 * 1024, 3 * (1 << 19) + 1)


def digest(t):
    """The result's bits (not its values: -0.0 and 0.0, or two NaNs, must match too)."""
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def rank_data(r, numel, dtype, salt):
    """Values that differ on each rank and span 2^-6..2^6, so that the order of a sum shows."""
    g = torch.Generator().manual_seed(7919 * r + 104729 * salt + numel)
    x = torch.randn(numel, generator=g) * torch.exp2(torch.randint(-6, 7, (numel,), generator=g).float())
    return x.to(dtype)


def same_everywhere(what, t):
    """Every rank's digest of t, gathered; raises on every rank when they differ."""
    mine = digest(t)
    every = hvd.allgather_object(mine, name=f"digest.{what}")
    if len(set(every)) != 1:
        raise AssertionError(f"{what}: the ranks received different bits: " +
                             ", ".join(f"rank {r} {d}" for r, d in enumerate(every)))


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    transport = os.environ.get("SAKER_COMM_TRANSPORT", "auto")
    for dtype in DTYPES:
        for numel in SIZES:
            for op in (hvd.Sum, hvd.Average):
                what = f"allreduce {dtype} {numel} {op.name}"
                x = rank_data(r, numel, dtype, 1)
                same_everywhere(what, hvd.allreduce(x, name=what, op=op))
                # in place, prescaled as Horovod's fp16 gradients are
                y = rank_data(r, numel, dtype, 2)
                hvd.allreduce_(y, name=what + " in place", op=op, prescale_factor=1.0 / 3)
                same_everywhere(what + " in place", y)
        # Many small tensors in one fusion cycle: each one's place in the fusion buffer differs
        # from its place alone.
        group = [rank_data(r, 1000 + 7 * i, dtype, 3 + i) for i in range(24)]
        out = hvd.grouped_allreduce(group, name=f"grouped {dtype}", op=hvd.Sum)
        same_everywhere(f"grouped allreduce {dtype}", torch.cat(out))
        # async: every handle in flight at once, synchronized in reverse order
        handles = [hvd.allreduce_async(t, name=f"async {dtype} {i}", op=hvd.Sum) for i, t in enumerate(group)]
        out = [hvd.synchronize(h) for h in reversed(handles)]
        same_everywhere(f"async allreduce {dtype}", torch.cat(out))
    hvd.shutdown()
    print(f"replica ok rank {r}/{n} {transport}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
