"""libsaker_comm's native alltoall, reduce-scatter and product, through saker.torch and the
torch.distributed backend (run under saker-run --local -n N, N = 2 or 3).

    hvd_native_check.py hvd       Horovod's alltoall (uneven and empty splits, every dtype,
                                  rows of any shape, autograd), allgather (even rows, which
                                  take no padding, every dtype, strided, uneven), reducescatter (rows that do
                                  not divide, integer and fp16 Average, pre/postscale,
                                  narrow ints) and Product, against values computed here
    hvd_native_check.py backend   all_to_all_single, all_to_all, reduce_scatter,
                                  reduce_scatter_tensor and PRODUCT on the saker backend,
                                  each against torch's gloo backend in the same processes
    hvd_native_check.py mismatch  the library's own cross-rank refusals (called below the
                                  Python check): every rank raises the same error naming the
                                  tensor and the ranks, and the communicator goes on

Each rank prints "native ok MODE rank R/N" at the end; any failed check raises.
"""

import datetime
import math
import os
import sys

import torch

import saker.torch as hvd


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {os.environ.get('RANK', '?')}: {what}")


def alltoall(r, n):
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                  torch.int8, torch.uint8, torch.int16, torch.bool):
        for tail in ((), (3,), (2, 5)):
            # rank r sends (r + k) % 3 rows to rank k (some zero); row j of the rows for k
            # holds 100*r + 10*k + j, so each received row names its sender and place.
            splits = [(r + k) % 3 for k in range(n)]
            rows = [torch.full((1,) + tail, 100 * r + 10 * k + j) for k in range(n) for j in range(splits[k])]
            x = torch.cat(rows).to(dtype) if rows else torch.zeros((0,) + tail, dtype=dtype)
            out, got = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32), name=f"a2a.{dtype}.{len(tail)}")
            want_splits = [(k + r) % 3 for k in range(n)]
            check(got.tolist() == want_splits, f"received splits {got.tolist()} != {want_splits}")
            want = [torch.full((1,) + tail, 100 * k + 10 * r + j) for k in range(n) for j in range(want_splits[k])]
            want = torch.cat(want).to(dtype) if want else torch.zeros((0,) + tail, dtype=dtype)
            check(out.dtype == dtype and torch.equal(out, want), f"alltoall {dtype} {tail}: {out} != {want}")
    # Without splits (rows divide evenly), and with autograd: the gradient goes back.
    x = (torch.arange(2.0 * n) + 10 * r).view(n, 2).requires_grad_()
    out = hvd.alltoall(x)
    check(torch.equal(out.detach(), torch.stack([torch.arange(2.0 * r, 2.0 * r + 2) + 10 * k for k in range(n)])),
          f"alltoall without splits: {out}")
    out.backward(torch.arange(2.0 * n).view(n, 2))  # row k of every rank's gradient goes back to rank k
    check(torch.equal(x.grad, torch.arange(2.0 * r, 2.0 * r + 2).repeat(n, 1)), f"alltoall gradient {x.grad}")
    # A large one crosses many ring chunks.
    big = torch.arange(n * 1_000_003, dtype=torch.int64) + r * 10**9
    out = hvd.alltoall(big[: n * 1_000_000])
    want = torch.cat([torch.arange(r * 1_000_000, (r + 1) * 1_000_000, dtype=torch.int64) + k * 10**9 for k in range(n)])
    check(torch.equal(out, want), "large alltoall")


def allgather(r, n):
    # Equal rows take the path without padding or concatenation (the result is the
    # library's receive buffer): right values, every dtype, and never the input itself.
    for dtype in (torch.float32, torch.int64, torch.float16, torch.uint8):
        x = (torch.arange(6) + 10 * r).view(3, 2).to(dtype)
        keep = x.clone()
        out = hvd.allgather(x, name=f"ag.even.{dtype}")
        want = torch.cat([(torch.arange(6) + 10 * k).view(3, 2).to(dtype) for k in range(n)])
        check(out.dtype == dtype and torch.equal(out, want), f"even allgather {dtype}: {out}")
        out.zero_()
        check(torch.equal(x, keep), "the even allgather's result shares memory with its input")
    # A non-contiguous input, and uneven rows (padded and cut) after even ones.
    x = (torch.arange(8.0) + r).view(2, 4).t()
    check(torch.equal(hvd.allgather(x, name="ag.strided"), torch.cat([(torch.arange(8.0) + k).view(2, 4).t() for k in range(n)])),
          "allgather of a transposed tensor")
    out = hvd.allgather(torch.full((r + 1, 2), float(r)), name="ag.uneven")
    check(torch.equal(out, torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])), f"uneven allgather {out}")


def reducescatter(r, n):
    for rows in (1, n, 2 * n + 1, 7 * n - 1):
        x = torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) * (r + 1)
        out = hvd.reducescatter(x, op=hvd.Sum, name=f"rs.{rows}")
        sizes = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
        start = sum(sizes[:r])
        want = torch.arange(rows * 3, dtype=torch.float64).view(rows, 3)[start: start + sizes[r]] * (n * (n + 1) / 2)
        check(torch.equal(out, want), f"reducescatter Sum rows={rows}: {out} != {want}")
    # Integer Average truncates toward zero (Horovod): -7 + r summed, divided by n.
    x = torch.full((n, 2), -7 + r, dtype=torch.int32)
    out = hvd.reducescatter(x, op=hvd.Average)
    s = sum(-7 + k for k in range(n))
    check(out.dtype == torch.int32 and torch.equal(out, torch.full((1, 2), int(s / n), dtype=torch.int32)),
          f"int Average truncates: {out} (sum {s})")
    # fp16: summed in the ring, divided in fp32 and rounded once.
    x = torch.full((n, 4), 0.1 * (r + 1), dtype=torch.float16)
    out = hvd.reducescatter(x, op=hvd.Average)
    check(out.dtype == torch.float16 and out.shape == (1, 4), f"fp16 Average shape {out.shape}")
    check(torch.allclose(out.float(), torch.full((1, 4), 0.1 * (n + 1) / 2), atol=2e-3), f"fp16 Average {out}")
    # pre- and postscale; int8 (reduced as int32, cast back).
    x = torch.ones(n, 2) * (r + 1)
    out = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    check(torch.equal(out, torch.full((1, 2), n * (n + 1) / 2)), f"pre/postscale {out}")
    x = torch.full((n,), 3 + r, dtype=torch.int8)
    out = hvd.reducescatter(x, op=hvd.Sum)
    check(out.dtype == torch.int8 and int(out[0]) == sum(3 + k for k in range(n)), f"int8 reducescatter {out}")
    # The gradient: the allgather of the gradient, times size() for Sum.
    x = torch.ones(2 * n, 2, requires_grad=True)
    out = hvd.reducescatter(x, op=hvd.Sum)
    out.backward(torch.ones_like(out))
    check(torch.equal(x.grad, torch.full((2 * n, 2), float(n))), f"reducescatter gradient {x.grad}")


def product(r, n):
    vals = [2.0, -1.0, 3.0]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8):
        x = torch.full((5,), vals[r % 3]).to(dtype)
        out = hvd.allreduce(x, op=hvd.Product, name=f"prod.{dtype}")
        want = 1.0
        for k in range(n):
            want *= vals[k % 3]
        check(out.dtype == dtype and torch.equal(out, torch.full((5,), want).to(dtype)), f"Product {dtype}: {out}")
    # int32 wraps as Horovod's C++ multiply does.
    x = torch.full((2,), 2**20 + r, dtype=torch.int32)
    out = hvd.allreduce(x, op=hvd.Product)
    want = 1
    for k in range(n):
        want = (want * (2**20 + k)) & 0xFFFFFFFF
    want = want - 2**32 if want >= 2**31 else want
    check(int(out[0]) == want, f"int32 Product wraps: {int(out[0])} != {want}")
    # grouped and with the gradient of Horovod's Product (the allreduce of the gradient).
    outs = hvd.grouped_allreduce([torch.full((2,), 2.0), torch.full((1,), 3.0)], op=hvd.Product)
    check(torch.equal(outs[0], torch.full((2,), 2.0**n)) and torch.equal(outs[1], torch.full((1,), 3.0**n)),
          f"grouped Product {outs}")


def backend(r, n):
    import torch.distributed as dist
    dist.init_process_group("saker", timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")

    def both(fn):
        return fn(None), fn(gloo)

    # all_to_all_single with uneven splits, 2-D rows.
    ins = [(r + k) % 3 + 1 for k in range(n)]
    outs = [(k + r) % 3 + 1 for k in range(n)]
    x = (torch.arange(sum(ins) * 4, dtype=torch.float32).view(-1, 4) + 1000 * r)

    def a2a(group):
        y = torch.full((sum(outs), 4), -1.0)
        dist.all_to_all_single(y, x, outs, ins, group=group)
        return y
    mine, ref = both(a2a)
    check(torch.equal(mine, ref), f"all_to_all_single differs from gloo: {mine} vs {ref}")
    # Even splits, int64, async.
    x2 = torch.arange(n * 6, dtype=torch.int64) * (r + 1)

    def a2a_even(group):
        y = torch.empty_like(x2)
        dist.all_to_all_single(y, x2, group=group, async_op=True).wait()
        return y
    mine, ref = both(a2a_even)
    check(torch.equal(mine, ref), "all_to_all_single (even) differs from gloo")
    # all_to_all of lists (torch 1.13's gloo has none: against the values themselves).
    xs = [torch.full((k + 1, 2), float(10 * r + k)) for k in range(n)]
    ys = [torch.empty(r + 1, 2) for _ in range(n)]
    dist.all_to_all(ys, xs)
    check(all(torch.equal(ys[k], torch.full((r + 1, 2), float(10 * k + r))) for k in range(n)), f"all_to_all: {ys}")
    # reduce_scatter (lists), SUM, PRODUCT and MAX (gloo 1.13 has no reduce_scatter either).
    for op, fold in ((dist.ReduceOp.SUM, sum), (dist.ReduceOp.PRODUCT, math.prod), (dist.ReduceOp.MAX, max)):
        parts = [torch.full((3,), float(r + 1 + k)) for k in range(n)]
        y = torch.empty(3)
        dist.reduce_scatter(y, parts, op=op)
        want = float(fold(q + 1 + r for q in range(n)))
        check(torch.equal(y, torch.full((3,), want)), f"reduce_scatter {op}: {y} != {want}")
    big = torch.arange(n * 300_001, dtype=torch.float32) * (r + 1)
    mine = torch.empty(300_001)
    dist.reduce_scatter_tensor(mine, big)
    want = torch.arange(r * 300_001, (r + 1) * 300_001, dtype=torch.float32) * (n * (n + 1) / 2)
    check(torch.equal(mine, want), "reduce_scatter_tensor")
    x = torch.full((4,), float(r + 2))
    dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
    want = 1.0
    for k in range(n):
        want *= k + 2
    check(torch.equal(x, torch.full((4,), want)), f"all_reduce PRODUCT {x}")
    # A mismatch the backend itself cannot see: the library refuses on every rank.
    x = torch.ones(2 * n, dtype=torch.float64 if r == 0 else torch.float32)
    try:
        dist.all_to_all_single(torch.empty_like(x), x, [2] * n, [2] * n)
        raise AssertionError(f"rank {r}: a dtype mismatch went through")
    except RuntimeError as e:
        check("type differs" in str(e) and "rank 0 fp64" in str(e) and "rank 1 fp32" in str(e), f"mismatch names: {e}")
    dist.all_reduce(torch.ones(1))  # and the group goes on
    dist.destroy_process_group()


def mismatch(r, n):
    comm = hvd.runtime.comm()
    # alltoall: rank 1 expects more rows from rank 0 than rank 0 sends.
    send = torch.zeros(n, dtype=torch.float32)
    recv = torch.zeros(n + 1, dtype=torch.float32)
    expect = [1] * n
    if r == 1:
        expect[0] = 2
    try:
        comm.alltoallv(send.data_ptr(), [1] * n, recv.data_ptr(), expect, 1, 0, "emb.rows")
        raise AssertionError(f"rank {r}: mismatched counts went through")
    except RuntimeError as e:
        check("alltoall of 'emb.rows' refused on every rank" in str(e) and
              "rank 1 expects 2 rows from rank 0, which sends it 1" in str(e), f"alltoall refusal: {e}")
    # reduce_scatter: counts that differ on the last rank.
    counts = [2] * n
    if r == n - 1:
        counts[0] = 3
    buf = torch.zeros(sum(counts))
    try:
        comm.reduce_scatter(buf.data_ptr(), recv.data_ptr(), counts, 0, 0, "grads.flat")
        raise AssertionError(f"rank {r}: mismatched counts went through")
    except RuntimeError as e:
        check("reduce_scatter of 'grads.flat'" in str(e) and "counts differ" in str(e) and
              f"rank {n - 1} [3, " in str(e), f"reduce_scatter refusal: {e}")
    # The job goes on.
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.refusal")
    check(torch.equal(out, torch.full((3,), float(n))), "allreduce after the refusals")


def main():
    mode = sys.argv[1]
    if mode == "backend":
        r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        backend(r, n)
        print(f"native ok backend rank {r}/{n}", flush=True)
        return
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if mode == "hvd":
        alltoall(r, n)
        allgather(r, n)
        reducescatter(r, n)
        product(r, n)
    elif mode == "mismatch":
        mismatch(r, n)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(f"native ok {mode} rank {r}/{n}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
