#!/usr/bin/python3
"""A torch.distributed script: DistributedDataParallel over the saker backend.

    saker-run --local -n 2 -- /usr/bin/python3 examples/torch/train_ddp.py --backend saker
    sbatch examples/torch/train.sbatch examples/torch/train_ddp.py --backend saker

Same model, data and checkpoints as train_hvd.py. --backend gloo runs the same script on
Gloo (for comparison); --single trains one process on the whole global batch.
"""

import os
import sys

import torch
import torch.distributed as dist

import saker.torch  # noqa: F401  (registers the "saker" backend)
from saker.torch import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.argv, backend, single = [a for a in sys.argv if a not in ("--single",)], "saker", "--single" in sys.argv
if "--backend" in sys.argv:
    i = sys.argv.index("--backend")
    backend = sys.argv[i + 1]
    del sys.argv[i:i + 2]
args = common.options(__doc__.splitlines()[0])
torch.set_num_threads(1)
if single:
    rank, size = 0, 1
else:
    dist.init_process_group(backend)  # RANK/WORLD_SIZE/MASTER_* come from saker-run
    rank, size = dist.get_rank(), dist.get_world_size()
model = common.make_model(args.seed)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
start = 0
if args.ckpt_dir:
    checkpoint.install_preemption_handler()  # saker-run forwards SIGTERM/USR1: checkpoint, exit, requeue
    state = checkpoint.load_latest(args.ckpt_dir, model=model, optimizer=optimizer)
    start = state["step"] if state else 0
    if start and rank == 0:
        print(f"resumed from step {start}", flush=True)
net = model if single else torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters

for step in range(start, args.steps):
    x, y = common.batch(step, args.batch, args.seed, rank, size)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    done = step + 1
    if args.ckpt_dir and done % args.ckpt_every == 0:
        checkpoint.save(args.ckpt_dir, model=model, optimizer=optimizer, step=done)
    if args.ckpt_dir:
        checkpoint.exit_if_preempted(args.ckpt_dir, model=model, optimizer=optimizer, step=done)
    common.maybe_fail(rank, done)
    if rank == 0 and done % 5 == 0:
        print(f"step {done} loss {loss.item():.4f}", flush=True)

print(f"rank {rank}/{size} params {common.param_hash(model)}\n", end="", flush=True)  # one write per line
if args.save_params and rank == 0:
    torch.save(model.state_dict(), args.save_params)
