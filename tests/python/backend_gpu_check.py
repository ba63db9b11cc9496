"""CUDA tensors through saker.torch, on a GPU machine (exits 77, SKIP, where torch has no
CUDA): the torch.distributed 'saker' backend collective by collective on device tensors,
including a side stream and CUDA-aware futures, DDP on the GPU against one process on the
global batch, and Horovod's API (allreduce, broadcast_parameters, DistributedOptimizer)
on device tensors. Run it under saker-run --local -n N or torchrun.

    backend_gpu_check.py --expect nccl   # each rank has a GPU of its own (or one rank)
    backend_gpu_check.py --expect host   # ranks share a GPU: NCCL cannot serve them

Prints 'gpu ok rank R/N path P' on success."""

import argparse
import datetime
import os
import sys

import torch

if not torch.cuda.is_available():
    print(f"SKIP: torch {torch.__version__} has no CUDA device (torch.version.cuda={torch.version.cuda})")
    sys.exit(77)

import torch.distributed as dist  # noqa: E402

import saker.torch as hvd  # noqa: E402  (registers the backend)

ap = argparse.ArgumentParser()
ap.add_argument("--expect", choices=("nccl", "host"), required=True,
                help="the path CUDA allreduce must take on this machine")
ap.add_argument("--steps", type=int, default=6)
args = ap.parse_args()

dist.init_process_group("saker", timeout=datetime.timedelta(seconds=120))
r, n = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", os.environ.get("SAKER_LOCAL_RANK", r)))
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)
total = n * (n + 1) / 2


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {r}: {what}")


pg = dist.distributed_c10d._get_default_group()
path = pg.device_path()  # collective: every rank decides alike
check(path.split(":")[0] == args.expect, f"CUDA allreduce path is {path!r}, expected {args.expect}")
if args.expect == "host" and n > 1:
    check("share" in path, f"the reason names the shared GPU: {path}")

# Every dtype and op, on the device, result still on the device.
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
    x = torch.full((1001,), r + 1, dtype=dtype, device=dev)
    dist.all_reduce(x)
    check(x.device == dev and torch.equal(x, torch.full_like(x, total)), f"all_reduce SUM {dtype}")
for op, want in ((dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, float(n)), (dist.ReduceOp.AVG, total / n)):
    x = torch.full((33,), float(r + 1), device=dev)
    dist.all_reduce(x, op=op)
    check(torch.allclose(x, torch.full_like(x, want)), f"all_reduce {op}")
strided = (torch.arange(12.0, device=dev).view(3, 4) * (r + 1)).t()
dist.all_reduce(strided)
check(torch.equal(strided, (torch.arange(12.0, device=dev).view(3, 4) * total).t()), "all_reduce of a strided view")

# Stream order: the fill, the allreduce and the use all on a side stream; 64 MiB so that
# a kernel racing the copy would be seen.
side = torch.cuda.Stream(device=dev)
with torch.cuda.stream(side):
    big = torch.empty(1 << 24, device=dev)
    big.fill_(float(r + 1))
    dist.all_reduce(big)
    doubled = big * 2
side.synchronize()
check(torch.equal(doubled, torch.full_like(doubled, 2 * total)), "side-stream fill -> all_reduce -> use")

# Async work and a CUDA-aware future chained with then().
x = torch.full((1 << 20,), float(r), device=dev)
work = dist.all_reduce(x, async_op=True)
chained = work.get_future().then(lambda f: f.value()[0] * 3)
work.wait()
check(torch.equal(chained.wait(), torch.full_like(x, 3 * n * (n - 1) / 2)), "future.then on a CUDA result")

b = torch.full((5,), float(r), device=dev)
dist.broadcast(b, src=n - 1)
check(torch.equal(b, torch.full_like(b, float(n - 1))), "broadcast")
outs = [torch.empty(2, 3, device=dev) for _ in range(n)]
dist.all_gather(outs, torch.full((2, 3), float(r), device=dev))
check(all(torch.equal(o, torch.full_like(o, float(k))) for k, o in enumerate(outs)), "all_gather")
flat = torch.empty(n * 4, dtype=torch.int64, device=dev)
dist.all_gather_into_tensor(flat, torch.full((4,), r, dtype=torch.int64, device=dev))
check(torch.equal(flat, torch.arange(n, device=dev).repeat_interleave(4)), "all_gather_into_tensor")
out = torch.empty(3, device=dev)
dist.reduce_scatter(out, [torch.full((3,), float(r + 10 * k), device=dev) for k in range(n)])
check(torch.equal(out, torch.full_like(out, total - n + 10.0 * r * n)), "reduce_scatter")
dist.barrier()


def model_and_data():
    torch.manual_seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(8 * 16, 10)).to(dev)
    g = torch.Generator().manual_seed(99)
    xs = [torch.randn(8 * n, 3, 16, 16, generator=g) for _ in range(args.steps)]
    ys = [torch.randint(0, 10, (8 * n,), generator=g) for _ in range(args.steps)]
    return model, xs, ys


def train(model, opt, xs, ys, lo, hi):
    for x, y in zip(xs, ys):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[lo:hi].to(dev)), y[lo:hi].to(dev)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


model, xs, ys = model_and_data()
reference = train(model, torch.optim.SGD(model.parameters(), lr=0.1), xs, ys, 0, 8 * n)

# DDP on the GPU over the saker backend: the same parameters as one process, every rank.
model, xs, ys = model_and_data()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
got = train(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), xs, ys, 8 * r, 8 * (r + 1))
check(got.device == dev, "DDP's parameters stay on the GPU")
worst = (got - reference).abs().max().item()
check(worst < 1e-5, f"DDP/saker on CUDA vs one process: max |diff| {worst}")
mine = got.clone()
dist.broadcast(mine, src=0)
check(torch.equal(mine, got), "DDP: identical parameters on every rank")

# Horovod's API on device tensors (it shares the backend's communicator).
hvd.init()
check(hvd.size() == n and hvd.rank() == r, "hvd sees the backend's communicator")
avg = hvd.allreduce(torch.full((7,), float(r + 1), device=dev), name="gpu.avg")
check(avg.device == dev and torch.allclose(avg, torch.full_like(avg, total / n)), "hvd.allreduce Average on CUDA")
model, xs, ys = model_and_data()
if r != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # broadcast_parameters must undo this
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
got = train(model, opt, xs, ys, 8 * r, 8 * (r + 1))
worst = (got - reference).abs().max().item()
check(worst < 1e-5, f"hvd.DistributedOptimizer on CUDA vs one process: max |diff| {worst}")

dist.barrier()
print(f"gpu ok rank {r}/{n} path {path.split(':')[0]} torch {torch.__version__} "
      f"{torch.cuda.get_device_name(dev)}", flush=True)
dist.destroy_process_group()
