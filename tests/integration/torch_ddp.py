"""A small PyTorch DDP job (gloo, CPU) started as plain processes by saker-run.

Checks that every rank sees the rank variables torch.distributed's env:// needs, that
they agree with Slurm's view of the task, and that allreduce and one DDP training step
give the expected results. Prints one line per rank: "ddp-check rank R/W ... ok".
Exit code 0 only when every check passes on this rank.
"""
import os
import sys

import torch
import torch.distributed as dist


def fail(msg):
    print(f"ddp-check rank {os.environ.get('RANK', '?')}: FAILED: {msg}", flush=True)
    sys.exit(1)


def main():
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        if name not in os.environ:
            fail(f"{name} is not set")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "SLURM_PROCID" in os.environ:
        if rank != int(os.environ["SLURM_PROCID"]):
            fail(f"RANK {rank} differs from SLURM_PROCID {os.environ['SLURM_PROCID']}")
        if int(os.environ["LOCAL_RANK"]) != int(os.environ["SLURM_LOCALID"]):
            fail("LOCAL_RANK differs from SLURM_LOCALID")
    dist.init_process_group("gloo", init_method="env://")
    if dist.get_rank() != rank or dist.get_world_size() != world:
        fail(f"torch sees rank {dist.get_rank()}/{dist.get_world_size()}")

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    if t.item() != expected:
        fail(f"allreduce gave {t.item()}, expected {expected}")

    # One DDP step: gradients are averaged, so every rank ends with the same weights.
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((8, 4), float(rank))
    model(x).sum().backward()
    opt.step()
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(w) for _ in range(world)]
    dist.all_gather(gathered, w)
    if any(not torch.equal(g, gathered[0]) for g in gathered):
        fail("DDP left the ranks with different weights")
    print(f"ddp-check rank {rank}/{world} local {os.environ['LOCAL_RANK']}/{os.environ['LOCAL_WORLD_SIZE']} "
          f"allreduce {t.item():g} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
