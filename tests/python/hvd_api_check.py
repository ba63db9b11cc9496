"""saker.torch's Horovod API, checked rank by rank (run under saker-run --local -n N).

Each check states Horovod's documented semantics; a failing check raises and the rank
exits non-zero. `mismatch` mode submits a parameter name only on rank 0 to provoke the
stall report.
"""

import os
import sys

import torch

import saker.torch as hvd


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {hvd.rank()}: {what}")


def expect_error(kind, words, fn):
    try:
        fn()
    except kind as e:
        check(all(w in str(e) for w in words), f"error names {words}: {e}")
        return
    raise AssertionError(f"rank {hvd.rank()}: expected {kind.__name__} mentioning {words}")


def collectives(r, n):
    x = torch.full((5,), float(r + 1))
    total = n * (n + 1) / 2
    check(torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((5,), total)), "allreduce Sum")
    check(torch.allclose(hvd.allreduce(x), torch.full((5,), total / n)), "allreduce default is Average")
    check(torch.equal(hvd.allreduce(x, average=False), torch.full((5,), total)), "average=False is Sum")
    check(torch.equal(hvd.allreduce(x, op=hvd.Min), torch.ones(5)), "allreduce Min")
    check(torch.equal(hvd.allreduce(x, op=hvd.Max), torch.full((5,), float(n))), "allreduce Max")
    check(torch.equal(x, torch.full((5,), float(r + 1))), "allreduce leaves its input alone")
    ints = torch.tensor([r + 1, 10 * (r + 1)], dtype=torch.int64)
    check(torch.equal(hvd.allreduce(ints, op=hvd.Sum), torch.tensor([total, 10 * total]).long()), "int64 Sum")
    y = torch.full((3, 2), float(r))
    hvd.allreduce_(y, op=hvd.Sum)
    check(torch.equal(y, torch.full((3, 2), float(n * (n - 1) / 2))), "allreduce_ in place")
    strided = torch.arange(12.0).view(3, 4).t()  # not contiguous
    hvd.allreduce_(strided, op=hvd.Sum)
    check(torch.equal(strided, n * torch.arange(12.0).view(3, 4).t()), "allreduce_ of a non-contiguous view")
    scaled = hvd.allreduce(torch.ones(2), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    check(torch.equal(scaled, torch.full((2,), float(n))), "pre/postscale factors")
    half = hvd.allreduce(torch.ones(4, dtype=torch.float16), op=hvd.Sum)
    check(half.dtype == torch.float16 and torch.equal(half, torch.full((4,), float(n), dtype=torch.float16)), "fp16")
    comp = hvd.allreduce(torch.full((4,), 0.5), op=hvd.Sum, compression=hvd.Compression.fp16)
    check(comp.dtype == torch.float32 and torch.equal(comp, torch.full((4,), 0.5 * n)), "fp16 compression")

    # Async: named tensors in a different order on each rank (fusion matches names).
    names = [f"t{i}" for i in range(6)]
    order = names if r % 2 == 0 else list(reversed(names))
    ts = {k: torch.full((100 + i,), float(r)) for i, k in enumerate(names)}
    hs = {k: hvd.allreduce_async_(ts[k], name=k, op=hvd.Sum) for k in order}
    for k in names:
        out = hvd.synchronize(hs[k])
        check(out is ts[k] and torch.equal(out, torch.full_like(out, n * (n - 1) / 2)), f"async named {k}")
    h = hvd.allreduce_async(torch.ones(3), name="polled")
    while not hvd.poll(h):
        pass
    check(torch.equal(hvd.synchronize(h), torch.ones(3)), "poll then synchronize")
    g = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(3) * 2 * r], op=hvd.Sum)
    s = n * (n - 1) / 2
    check(torch.equal(g[0], torch.full((2,), s)) and torch.equal(g[1], torch.full((3,), 2 * s)), "grouped_allreduce")

    b = torch.full((4,), float(r))
    check(torch.equal(hvd.broadcast(b, root_rank=n - 1), torch.full((4,), float(n - 1))), "broadcast")
    check(torch.equal(b, torch.full((4,), float(r))), "broadcast leaves its input alone")
    hvd.broadcast_(b, root_rank=0)
    check(torch.equal(b, torch.zeros(4)), "broadcast_ in place")
    ga = hvd.allgather(torch.full((r + 1, 2), float(r)))
    want = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    check(torch.equal(ga, want), "allgather with a different first dimension per rank")
    check(hvd.broadcast_object({"rank": r, "t": torch.ones(2) * r}, root_rank=1)["rank"] == 1, "broadcast_object")
    check(hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)], "allgather_object")

    expect_error(NotImplementedError, ["Adasum", "Average"], lambda: hvd.allreduce(x, op=hvd.Adasum))
    expect_error(TypeError, ["torch.bool"], lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)))


def optimizer(r, n):
    """backward_passes_per_step=2 with Average equals one step on the summed gradients,
    averaged over ranks; the result is the same on every rank."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    ref.load_state_dict(model.state_dict())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    check(isinstance(opt, torch.optim.SGD), "DistributedOptimizer is still an SGD")
    data = [torch.randn(8, 4, generator=torch.Generator().manual_seed(100 * k + p)) for k in range(n) for p in (0, 1)]
    for p in (0, 1):
        model(data[2 * r + p]).sum().backward()
    opt.step()
    # Reference: the gradient summed over passes, averaged over ranks, in one process.
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for k in range(n):
        for p in (0, 1):
            (ref(data[2 * k + p]).sum() / n).backward()
    ref_opt.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        check(torch.allclose(a, b, atol=1e-6), f"DistributedOptimizer matches the reference for {name}")
    same = hvd.allgather_object(sorted((k, v.sum().item()) for k, v in model.state_dict().items()))
    check(all(s == same[0] for s in same), "parameters identical on every rank")
    st = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    hvd.broadcast_optimizer_state(st, root_rank=0)
    check(st.param_groups[0]["lr"] == 0.01, "broadcast_optimizer_state gives rank 0's hyper-parameters")


def join_uneven(r, n):
    """Horovod's join with uneven data: rank r has r+1 batches. A rank that joined stands in
    with zero gradients, Average still divides by size(), so the model equals a single
    process applying, at step s, the gradients of the ranks that still had data, over n.
    The rank with the most batches joins last, and every rank hears so; as in Horovod, the
    ranks that joined early missed the later steps and take the last rank's parameters."""
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(prefix="uneven"))
    batch = lambda k, s: torch.randn(4, 3, generator=torch.Generator().manual_seed(1000 * k + s))
    for s in range(r + 1):
        opt.zero_grad()
        model(batch(r, s)).pow(2).sum().backward()
        opt.step()
    last = hvd.join()
    check(last == n - 1, f"join() returns the last rank to join ({n - 1}), got {last}")
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for s in range(n):
        ref_opt.zero_grad()
        for k in range(s, n):  # ranks k >= s still had a batch at step s
            (ref(batch(k, s)).pow(2).sum() / n).backward()
        ref_opt.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        check(torch.allclose(a, b, atol=1e-5), f"join: rank {r}'s {name} matches the uneven-data reference")
    same = hvd.allgather_object([v.tolist() for v in model.state_dict().values()])
    check(all(x == same[0] for x in same), "join: parameters identical on every rank")


def sync_batch_norm(r, n):
    """SyncBatchNorm on this rank's share equals BatchNorm2d on the global batch: output,
    input gradient, weight/bias gradients summed over ranks, running statistics."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4 * n, 3, 5, 5, generator=g) * 3 + 1
    w = torch.randn(4 * n, 3, 5, 5, generator=g)
    ref = torch.nn.BatchNorm2d(3)
    sbn = hvd.SyncBatchNorm(3)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5, generator=g)
        ref.bias.uniform_(-1, 1, generator=g)
    sbn.load_state_dict(ref.state_dict())
    xg = x.clone().requires_grad_()
    (ref(xg) * w).sum().backward()
    mine = slice(4 * r, 4 * (r + 1))
    xl = x[mine].clone().requires_grad_()
    out = sbn(xl)
    (out * w[mine]).sum().backward()
    ref_out = torch.nn.functional.batch_norm(x, None, None, ref.weight, ref.bias, training=True)
    check(torch.allclose(out, ref_out[mine].detach(), atol=1e-5), "SyncBatchNorm output")
    check(torch.allclose(xl.grad, xg.grad[mine], atol=1e-5), "SyncBatchNorm input gradient")
    check(torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), ref.weight.grad, atol=1e-4), "weight gradient")
    check(torch.allclose(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), ref.bias.grad, atol=1e-4), "bias gradient")
    check(torch.allclose(sbn.running_mean, ref.running_mean, atol=1e-6), "running mean")
    check(torch.allclose(sbn.running_var, ref.running_var, atol=1e-5), "running variance")


def mismatch(r):
    """Rank 0 submits a parameter the others never do: the stall report must name it, and it
    must reach the script as Horovod's exception type."""
    handle = hvd.allreduce_async(torch.ones(2), name="layer.only_on_rank0.weight" if r == 0 else "layer.shared.weight")
    try:
        hvd.synchronize(handle)
    except hvd.HorovodInternalError as e:
        # One write per rank (a line below PIPE_BUF is atomic): both ranks fail at the same
        # moment, and two tracebacks printed at once interleave character by character.
        os.write(2, f"rank {r}: {type(e).__module__}.{type(e).__name__}: {e}\n".encode())
        sys.exit(1)


hvd.init()
rank, size = hvd.rank(), hvd.size()
check(hvd.is_initialized() and 0 <= hvd.local_rank() < hvd.local_size() and hvd.cross_rank() < hvd.cross_size(),
      "placement")
if sys.argv[1:] == ["mismatch"]:
    mismatch(rank)
else:
    collectives(rank, size)
    optimizer(rank, size)
    join_uneven(rank, size)
    sync_batch_norm(rank, size)
    print(f"hvd-api ok rank {rank}/{size} local {hvd.local_rank()}/{hvd.local_size()} "
          f"cross {hvd.cross_rank()}/{hvd.cross_size()}", flush=True)
hvd.shutdown()
