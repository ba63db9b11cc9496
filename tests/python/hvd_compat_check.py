"""Horovod's PyTorch semantics that issue 29 found missing in saker.torch, checked rank by
rank (run under saker-run --local -n N, N = 2 or 3).

    hvd_compat_check.py semantics [PART...]
                                     autograd, numerics, the added collectives, error types,
                                     the optimizer's sparse gradients and empty state (or
                                     only the named parts: autograd numerics added_api
                                     error_types optimizer)
    hvd_compat_check.py mismatch [CASE]
                                     every class of cross-rank mismatch (or the one whose
                                     name holds CASE, e.g. "broadcast root", "join allgather"):
                                     each must raise the same error on every rank, naming the
                                     tensor and each rank's value, and the job goes on
    hvd_compat_check.py lifecycle K  shutdown() then init() K times in a row

The expected values are Horovod's documented semantics (v0.28), written here from them.
Each rank prints "compat ok MODE rank R/N" at the end; any failed check raises.
"""

import gc
import sys
import warnings

import torch

import saker.torch as hvd


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {hvd.rank()}: {what}")


def raises(kind, fn, words=()):
    try:
        fn()
    except kind as e:
        msg = str(e)
        check(all(w in msg for w in words), f"{kind.__name__} names {list(words)}: {msg}")
        return msg
    except Exception as e:  # noqa: BLE001 - report the wrong kind
        raise AssertionError(f"rank {hvd.rank()}: expected {kind.__name__}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"rank {hvd.rank()}: expected {kind.__name__}, nothing raised")


def autograd(r, n):
    # allreduce: the gradient is the allreduce of the gradient, with the same op.
    x = torch.full((3, 2), float(r + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum)
    y.backward(torch.ones(3, 2) * (r + 1))
    check(y.grad_fn is not None, "allreduce output has a grad_fn")
    check(torch.equal(x.grad, torch.full((3, 2), n * (n + 1) / 2)), f"allreduce Sum gradient: {x.grad}")
    x = torch.ones(4, requires_grad=True)
    hvd.allreduce(x).sum().backward()  # Average
    check(torch.allclose(x.grad, torch.ones(4)), f"allreduce Average gradient: {x.grad}")
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    ga, gb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    (ga.sum() + 2 * gb.sum()).backward()
    check(torch.equal(a.grad, torch.full((2,), float(n))) and torch.equal(b.grad, torch.full((3,), 2.0 * n)),
          "grouped_allreduce gradient")
    # allgather: the averaged gradient's slice of this rank's rows.
    x = torch.ones(r + 1, 2, requires_grad=True)
    g = hvd.allgather(x)
    grad_ys = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    g.backward(grad_ys)
    check(torch.equal(x.grad, torch.full((r + 1, 2), float(r))), f"allgather gradient: {x.grad}")
    # broadcast: averaged gradient on the root, zero elsewhere.
    root = n - 1
    x = torch.ones(5, requires_grad=True)
    hvd.broadcast(x, root_rank=root).backward(torch.ones(5))
    check(torch.equal(x.grad, torch.ones(5) * (1.0 if r == root else 0.0)), f"broadcast gradient: {x.grad}")
    # alltoall: the gradient goes back where the rows came from.
    x = torch.arange(2.0 * n).view(n, 2).requires_grad_()
    out = hvd.alltoall(x)
    (out * (r + 1)).sum().backward()
    check(torch.equal(x.grad, torch.arange(1.0, n + 1).repeat_interleave(2).view(n, 2)), f"alltoall gradient {x.grad}")
    # reducescatter: allgather of the gradient (times size() for Sum).
    x = torch.ones(2 * n, 3, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum).sum().backward()
    check(torch.equal(x.grad, torch.full((2 * n, 3), float(n))), f"reducescatter Sum gradient: {x.grad}")
    x = torch.ones(2 * n, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Average).sum().backward()
    check(torch.equal(x.grad, torch.ones(2 * n)), f"reducescatter Average gradient: {x.grad}")


def numerics(r, n):
    # Integer Average truncates toward zero (Horovod scales in float64, then casts).
    t = torch.tensor([-3, -1, 1, 3, -4], dtype=torch.int32) if r == 0 else torch.zeros(5, dtype=torch.int32)
    got = hvd.allreduce(t)
    want = torch.tensor([int(v / n) for v in (-3, -1, 1, 3, -4)], dtype=torch.int32)
    check(torch.equal(got, want), f"int Average truncates toward zero: {got} != {want}")
    t64 = torch.tensor([-7], dtype=torch.int64) if r == 0 else torch.zeros(1, dtype=torch.int64)
    check(int(hvd.allreduce(t64)) == int(-7 / n), "int64 Average truncates toward zero")
    # fp16 postscale: in float32, then rounded to float16 once.
    h = torch.tensor([5.0, 7.0, 10.0, 11.0, 13.0], dtype=torch.float16)
    f = 0.7
    total = hvd.allreduce(h, op=hvd.Sum)
    got = hvd.allreduce(h, op=hvd.Sum, postscale_factor=f)
    want = (total.float() * f).half()
    check(got.dtype == torch.float16 and torch.equal(got, want), f"fp16 postscale in fp32: {got} != {want}")
    check(not torch.equal(want, total * torch.tensor(f, dtype=torch.float16)), "the test tells fp32 from fp16 math")
    got = hvd.allreduce(h, op=hvd.Average)
    check(torch.equal(got, (total.float() * (1.0 / n)).half()), f"fp16 Average in fp32: {got}")
    # Prescale of an int tensor: float64 multiply, truncated, then summed.
    it = torch.tensor([5, -5, 7], dtype=torch.int64)
    got = hvd.allreduce(it, op=hvd.Sum, prescale_factor=0.5)
    check(torch.equal(got, torch.tensor([2, -2, 3]) * n), f"int prescale: {got}")
    check(torch.equal(it, torch.tensor([5, -5, 7])), "prescale leaves the input alone")
    got = hvd.allreduce(torch.tensor([3], dtype=torch.int32), op=hvd.Sum, postscale_factor=0.5)
    check(int(got) == int(3 * n * 0.5), "int postscale truncates")
    # uint8/int8/int16 (Horovod reduces them too): integer sums wrap as the type's own.
    for dt, vals in ((torch.int8, [100, -100, 7]), (torch.uint8, [200, 3, 0]), (torch.int16, [30000, -5, 1])):
        got = hvd.allreduce(torch.tensor(vals, dtype=dt), op=hvd.Sum)
        check(got.dtype == dt and torch.equal(got, (torch.tensor(vals) * n).to(dt)), f"{dt} Sum: {got}")
    got = hvd.allreduce(torch.tensor([7, -7], dtype=torch.int8) * (1 if r == 0 else 0))
    check(torch.equal(got, torch.tensor([int(7 / n), int(-7 / n)], dtype=torch.int8)), f"int8 Average: {got}")
    # Product.
    p = hvd.allreduce(torch.tensor([float(r + 1), 2.0]), op=hvd.Product)
    fact = 1.0
    for k in range(n):
        fact *= k + 1
    check(torch.equal(p, torch.tensor([fact, 2.0 ** n])), f"Product: {p}")


def added_api(r, n):
    # allgather_async and grouped_allgather.
    h = hvd.allgather_async(torch.full((r + 1,), float(r)), name="ag.async")
    check(torch.equal(hvd.synchronize(h), torch.cat([torch.full((k + 1,), float(k)) for k in range(n)])),
          "allgather_async")
    outs = hvd.grouped_allgather([torch.full((1, 2), float(r)), torch.full((r + 2,), 1.0)])
    check(torch.equal(outs[0], torch.arange(float(n)).repeat_interleave(2).view(n, 2)), "grouped_allgather 0")
    check(torch.equal(outs[1], torch.ones(sum(k + 2 for k in range(n)))), "grouped_allgather 1")
    h = hvd.grouped_allgather_async([torch.ones(1) * r])
    check(torch.equal(hvd.synchronize(h)[0], torch.arange(float(n))), "grouped_allgather_async")
    # alltoall without splits: row k goes to rank k.
    x = torch.arange(n * 3, dtype=torch.int64).view(n, 3) + 100 * r
    out = hvd.alltoall(x)
    want = torch.stack([torch.arange(r * 3, r * 3 + 3) + 100 * k for k in range(n)])
    check(torch.equal(out, want), f"alltoall: {out}")
    # alltoall with splits: rank r sends k+1 rows to rank k.
    splits = torch.tensor([k + 1 for k in range(n)], dtype=torch.int32)
    x = torch.full((int(splits.sum()), 2), float(r))
    out, recv = hvd.alltoall(x, splits=splits)
    check(torch.equal(recv, torch.full((n,), r + 1, dtype=torch.int32)), f"alltoall received splits: {recv}")
    check(torch.equal(out, torch.arange(float(n)).repeat_interleave(r + 1).unsqueeze(1).expand(-1, 2)),
          f"alltoall with splits: {out}")
    h = hvd.alltoall_async(torch.arange(float(n)) + r)
    check(torch.equal(hvd.synchronize(h), torch.full((n,), float(r)) + torch.arange(float(n))),
          "alltoall_async")
    # reducescatter: dimension 0 split as evenly as possible, the first ranks one row more.
    rows = 2 * n + 1
    x = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * (r + 1)
    out = hvd.reducescatter(x, op=hvd.Sum)
    start = sum(2 + (1 if k < 1 else 0) for k in range(r))
    mine = 2 + (1 if r < 1 else 0)
    want = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2)[start: start + mine] * (n * (n + 1) / 2)
    check(torch.equal(out, want), f"reducescatter Sum: {out} != {want}")
    out = hvd.synchronize(hvd.reducescatter_async(torch.ones(n, 2) * (r + 1)))
    check(torch.allclose(out, torch.full((1, 2), (n + 1) / 2)), "reducescatter_async Average (default)")
    outs = hvd.grouped_reducescatter([torch.ones(n) * r, torch.ones(2 * n, 2)], op=hvd.Sum)
    check(torch.equal(outs[0], torch.full((1,), n * (n - 1) / 2)) and torch.equal(outs[1], torch.full((2, 2), float(n))),
          "grouped_reducescatter")
    # Sparse allreduce: Horovod's allgather of indices and values.
    idx = torch.tensor([[r, n]])
    sp = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0]), (n + 1,))
    out = hvd.synchronize(hvd.sparse_allreduce_async(sp, name="sparse.t", op=hvd.Sum))
    want = torch.ones(n + 1)
    want[n] = 2.0 * n
    check(out.is_sparse and torch.equal(out.to_dense(), want), f"sparse allreduce: {out.to_dense()}")
    # Horovod's sparse_allreduce_async hands back a function that returns the result.
    out = hvd.sparse_allreduce_async(sp, name="sparse.call", op=hvd.Sum)()
    check(out.is_sparse and torch.equal(out.to_dense(), want), f"sparse allreduce handle(): {out}")
    # An async ordered collective is not done when first polled; polling starts it, and it completes.
    h = hvd.allgather_async(torch.ones(1) * r, name="poll.ag")
    check(hvd.poll(h) is False, "poll() of an allgather not yet started is False")
    while not hvd.poll(h):
        pass
    check(torch.equal(hvd.synchronize(h), torch.arange(float(n))), "polled allgather")


def error_types(r, n):
    check(issubclass(hvd.HorovodInternalError, RuntimeError), "HorovodInternalError is a RuntimeError")
    t = torch.ones(4)
    h = hvd.allreduce_async(t, name="duplicate_name")
    raises(ValueError, lambda: hvd.allreduce_async(t, name="duplicate_name"), ["duplicate_name"])
    hvd.synchronize(h)
    check(hvd.synchronize(hvd.allreduce_async(t, name="duplicate_name")) is not None, "the name is free again")
    # alltoall's rules: integer splits; without splits the rows divide evenly. One rank
    # breaking them is refused on every rank (ValueError, naming it), and the job goes on.
    bad = r == n - 1
    raises(ValueError, lambda: hvd.alltoall(torch.ones(n), splits=torch.ones(n, dtype=torch.float32 if bad else
                                                                               torch.int32)),
           [f"rank {n - 1} gave splits that are not integers"])
    raises(ValueError, lambda: hvd.alltoall(torch.ones(n + 1 if bad else n)),
           [f"rank {n - 1} gave no splits", f"({n + 1}) is not a multiple of the number of ranks ({n})"])
    check(torch.equal(hvd.alltoall(torch.ones(n) * r), torch.arange(float(n))), "alltoall goes on after refusals")
    # An async broadcast/allgather/alltoall/reducescatter returns at once and holds its name
    # until synchronized: the same name again is refused there (ValueError), even while the
    # other ranks are elsewhere (rank 0 submits before a barrier that the others pass first,
    # Horovod's test pattern); synchronized after, it completes with the right values.
    x = torch.full((n,), float(r))
    ops = [("dup.ag", lambda: hvd.allgather_async(x[:1], name="dup.ag"), torch.arange(float(n))),
           ("dup.bc", lambda: hvd.broadcast_async(x[:1], 0, name="dup.bc"), torch.zeros(1)),
           ("dup.a2a", lambda: hvd.alltoall_async(x, name="dup.a2a"), torch.arange(float(n))),
           ("dup.rs", lambda: hvd.reducescatter_async(torch.ones(n, 1), name="dup.rs", op=hvd.Sum),
            torch.full((1, 1), float(n)))]
    for name, submit, want in ops:
        if r == 0:
            h = submit()
            raises(ValueError, submit, [name, "already in flight"])
        hvd.barrier()
        if r != 0:
            h = submit()
            raises(ValueError, submit, [name, "already in flight"])
        hvd.barrier()
        got = hvd.synchronize(h)
        check(torch.equal(got, want), f"{name} after the refused duplicate: {got} != {want}")


class Sparse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 3, sparse=True)
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, i):
        return self.fc(self.emb(i)).sum()


def optimizer(r, n):
    # Sparse gradients: both of Horovod's ways, and the result equals dense training.
    for dense in (False, True):
        torch.manual_seed(3)
        model = Sparse()
        ref = Sparse()
        ref.load_state_dict(model.state_dict())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(prefix=f"sp{int(dense)}"),
                                       sparse_as_dense=dense)
        model(torch.tensor([r, r + 1])).backward()
        opt.step()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
        for k in range(n):
            (ref(torch.tensor([k, k + 1])) / n).backward()
        ref_opt.step()
        for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
            check(torch.allclose(a, b, atol=1e-6), f"sparse gradients (sparse_as_dense={dense}): {name}")
    # An optimizer that needs sparse gradients (SparseAdam) gets them back sparse, both ways;
    # Horovod's _parameter_names (parameter -> name) is there, the same names on every rank.
    for dense in (False, True):
        model = Sparse()
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam([model.emb.weight], lr=0.1),
                                       named_parameters=[(f"sa{int(dense)}.emb.weight", model.emb.weight)],
                                       sparse_as_dense=dense)
        model(torch.tensor([r, r + 1])).backward()
        opt.step()
        check(model.emb.weight.grad.is_sparse, f"SparseAdam got a sparse gradient (sparse_as_dense={dense})")
        names = sorted(opt._parameter_names.values())
        check(names == [f"sa{int(dense)}.emb.weight"] and len(set(map(tuple, hvd.allgather_object(names)))) == 1,
              f"_parameter_names: {opt._parameter_names}")
    # step() after synchronize() warns (Horovod) and still steps.
    model = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(prefix="warn"))
    model(torch.ones(1, 2) * r).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    check(any("skip_synchronize" in str(w.message) for w in caught), "step() after synchronize() warns")
    # broadcast_optimizer_state on an optimizer that has no state yet (Horovod creates it).
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for make in (lambda p: torch.optim.Adam(p, lr=0.01 * (r + 1)),
                 lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9 if r == 0 else 0.5)):
        for wrap in (False, True):
            inner = make(model.parameters())
            opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters()) if wrap else inner
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            got = hvd.allgather_object(repr(opt.state_dict()["param_groups"]))
            check(all(g == got[0] for g in got), f"broadcast_optimizer_state without state: {got}")
            check(len(opt.state_dict()["state"]) == 2, "broadcast_optimizer_state creates the state (Horovod)")
    # ... also when a parameter does not train: it keeps no gradient, the others get zeros.
    frozen = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
    trained = torch.nn.Parameter(torch.rand(4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([frozen, trained], lr=0.001, momentum=0.9, nesterov=True),
                                   named_parameters=[("frozen", frozen), ("trained", trained)])
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(frozen.grad is None and trained.grad is not None and torch.equal(trained.grad, torch.zeros(4)),
          "broadcast_optimizer_state: zero gradients for the parameters that train, none for the others")
    check(torch.equal(hvd.broadcast(trained.grad, root_rank=0), trained.grad), "that gradient broadcasts")


def semantics(r, n, parts):
    for part in parts or ("autograd", "numerics", "added_api", "error_types", "optimizer"):
        globals()[part](r, n)


def mismatch(r, n, only=None):
    """Each class: the same HorovodInternalError (a RuntimeError) on every rank, naming the
    tensor and each rank's value; the job then goes on (the last check runs a collective)."""
    other = r == n - 1  # the rank that differs
    f32 = torch.float32
    w = torch.nn.Parameter(torch.ones((3, 2) if other else (2, 3)))  # same size, another shape
    cases = [
        ("allreduce dtype", ["ar.dtype", "int32", "float32"],
         lambda: hvd.allreduce(torch.ones(4, dtype=torch.int32 if other else f32), name="ar.dtype")),
        ("allreduce shape, same count", ["ar.shape", "[2, 3]", "[3, 2]"],
         lambda: hvd.allreduce(torch.ones((3, 2) if other else (2, 3)), name="ar.shape")),
        ("allreduce shape, large", ["ar.big", "[128, 256]", "[256, 128]"],  # fingerprint apart from the data
         lambda: hvd.allreduce(torch.ones((256, 128) if other else (128, 256)), name="ar.big")),
        ("allreduce shape, float16", ["ar.half", "[2, 3]", "[3, 2]"],
         lambda: hvd.allreduce(torch.ones((3, 2) if other else (2, 3), dtype=torch.float16), name="ar.half")),
        ("allreduce shape", ["ar.count", "[4]", "[5]"],
         lambda: hvd.allreduce(torch.ones(5 if other else 4), name="ar.count")),
        ("allreduce op", ["ar.op", "Sum", "Max"],
         lambda: hvd.allreduce(torch.ones(2), name="ar.op", op=hvd.Max if other else hvd.Sum)),
        ("broadcast dtype", ["bc.dtype", "int32", "float32"],
         lambda: hvd.broadcast(torch.ones(4, dtype=torch.int32 if other else f32), 0, name="bc.dtype")),
        ("broadcast shape, same count", ["bc.shape", "[2, 3]", "[6]"],
         lambda: hvd.broadcast(torch.ones(6 if other else (2, 3)), 0, name="bc.shape")),
        ("broadcast root", ["bc.root", "root"],
         lambda: hvd.broadcast(torch.ones(2), r, name="bc.root")),
        ("allgather dtype", ["ag.dtype", "int64", "float32"],
         lambda: hvd.allgather(torch.ones(2, dtype=torch.int64 if other else f32), name="ag.dtype")),
        ("allgather shape", ["ag.shape", "[2, 3]", "[2, 4]"],
         lambda: hvd.allgather(torch.ones(2, 4 if other else 3), name="ag.shape")),
        ("allgather rank", ["ag.ndim", "[2, 3]", "[6]"],
         lambda: hvd.allgather(torch.ones(6 if other else (2, 3)), name="ag.ndim")),
        ("alltoall dtype", ["a2a.dtype", "float64", "float32"],
         lambda: hvd.alltoall(torch.ones(n, dtype=torch.float64 if other else f32), name="a2a.dtype")),
        ("reducescatter shape", ["rs.shape", f"[{n}, 2]", f"[{n}, 3]"],
         lambda: hvd.reducescatter(torch.ones(n, 3 if other else 2), name="rs.shape")),
        ("DistributedOptimizer model", ["DistributedOptimizer", "model differs", "1 parameters"],
         lambda: hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), named_parameters=[("w", w)])),
        ("broadcast_parameters", ["broadcast_parameters", "model differs", "1 tensors"],
         lambda: hvd.broadcast_parameters({"w": w}, root_rank=0)),
        ("different collectives", ["broadcast", "allgather"],
         lambda: hvd.allgather(torch.ones(1)) if other else hvd.broadcast(torch.ones(1), 0)),
    ]
    for what, words, fn in cases:
        if only and only not in what:
            continue
        msg = raises(RuntimeError, fn, words)
        got = hvd.allgather_object(msg)
        check(all(m == got[0] for m in got), f"{what}: the same error on every rank: {got}")
        if r == 0:
            print(f"mismatch {what}: {msg}", flush=True)
    # allreduce_ of a tensor of the same count and another shape: refused before any byte
    # moves (the fusion negotiation compares shapes), so the in-place tensor keeps its values.
    if not only or only == "allreduce_ in place":
        t = torch.full((3, 2) if other else (2, 3), float(r + 1))
        raises(RuntimeError, lambda: hvd.allreduce_(t, name="ar.inplace"), ["ar.inplace", "[2, 3]", "[3, 2]"])
        check(torch.equal(t, torch.full(t.shape, float(r + 1))), f"refused allreduce_ left the tensor alone: {t}")
    # A join during an allgather or a broadcast: the ranks that did not join raise, then join.
    for kind in ("allgather", "broadcast"):
        if only and only != "join " + kind:
            continue
        if r == 0:
            hvd.join()
        else:
            raises(RuntimeError, lambda: hvd.allgather(torch.ones(1)) if kind == "allgather"
                   else hvd.broadcast(torch.ones(1), 1), ["join"])
            hvd.join()
    check(torch.equal(hvd.allgather(torch.ones(1) * r), torch.arange(float(n))), "the job goes on after mismatches")


def lifecycle(r, n, times):
    # A refused ordered collective (each rank names itself the root) keeps its error for
    # synchronize. The error's frames held the communicator in a reference cycle, so after
    # shutdown() the old communicator was left to Python's garbage collector: collected on
    # one rank only, its teardown (collective) waited for the others for ever with the GIL
    # held, and the next collective hung (Horovod's own suite: test_async_sparse_allreduce).
    for i in range(2):
        raises(RuntimeError, lambda: hvd.broadcast(torch.ones(1), root_rank=r, name=f"gc.root.{i}"), ("root",))
        hvd.shutdown()
        hvd.init()
        if r == n - 1:
            gc.collect()
        x = hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"gc.after.{i}")
        check(torch.equal(x, torch.full((1,), float(n))), f"a collective after one rank collected the old communicator ({i})")
    # An allreduce left in flight at shutdown() (never synchronized): the library's threads may
    # write into its buffer until the communicator is gone. Freed first, it crashed a rank
    # (SIGSEGV, or a corrupted heap later on).
    for i in range(4):
        big = torch.ones(8 << 20) * (r + 1)
        hvd.allreduce_async(big, name=f"left.{i}")
        del big
        hvd.shutdown()
        junk = [torch.zeros(1 << 20) for _ in range(40)]  # reuse what a freed buffer held
        del junk
        hvd.init()
    for i in range(times):
        hvd.shutdown()
        check(not hvd.is_initialized(), "shutdown() uninitializes")
        hvd.init()
        check(hvd.rank() == r and hvd.size() == n, "init() again: same rank and size")
        x = hvd.allreduce(torch.ones(2) * (r + i), op=hvd.Sum, name="life")
        check(torch.equal(x, torch.full((2,), float(n * i + n * (n - 1) / 2))), f"allreduce after re-init {i}")
        check(torch.equal(hvd.broadcast(torch.ones(1) * r, 0), torch.zeros(1)), f"broadcast after re-init {i}")


hvd.init()
rank, size = hvd.rank(), hvd.size()
mode = sys.argv[1] if len(sys.argv) > 1 else "semantics"
if mode == "semantics":
    semantics(rank, size, sys.argv[2:])
elif mode == "mismatch":
    mismatch(rank, size, " ".join(sys.argv[2:]) or None)
elif mode == "lifecycle":
    lifecycle(rank, size, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
else:
    raise SystemExit(f"unknown mode {mode}")
print(f"compat ok {mode} rank {rank}/{size}", flush=True)
hvd.shutdown()
