#!/usr/bin/python3
"""A Horovod-style script: trains a small CNN on generated data with saker.torch.

    saker-run --local -n 2 -- /usr/bin/python3 examples/torch/train_hvd.py --ckpt-dir /tmp/ck
    sbatch examples/torch/train.sbatch examples/torch/train_hvd.py

The only Saker-specific line is the import; with `import horovod.torch as hvd` it is a
Horovod script. It checkpoints every --ckpt-every steps, resumes from the newest
checkpoint after a restart, and prints a hash of the final parameters.
"""

import os
import sys

import torch

import saker.torch as hvd
from saker.torch import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.options(__doc__.splitlines()[0])
hvd.init()
torch.set_num_threads(1)
model = common.make_model(args.seed)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
start = 0
if args.ckpt_dir:
    checkpoint.install_preemption_handler()  # saker-run forwards SIGTERM/USR1: checkpoint, exit, requeue
    state = checkpoint.load_latest(args.ckpt_dir, model=model, optimizer=optimizer)
    start = state["step"] if state else 0
# Every rank starts from rank 0's parameters and optimizer state (Horovod's idiom).
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
if start and hvd.rank() == 0:
    print(f"resumed from step {start}", flush=True)

for step in range(start, args.steps):
    x, y = common.batch(step, args.batch, args.seed, hvd.rank(), hvd.size())
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    done = step + 1
    if args.ckpt_dir and done % args.ckpt_every == 0:
        checkpoint.save(args.ckpt_dir, model=model, optimizer=optimizer, step=done)
    if args.ckpt_dir:
        checkpoint.exit_if_preempted(args.ckpt_dir, model=model, optimizer=optimizer, step=done)
    common.maybe_fail(hvd.rank(), done)
    if hvd.rank() == 0 and done % 5 == 0:
        print(f"step {done} loss {loss.item():.4f}", flush=True)

print(f"rank {hvd.rank()}/{hvd.size()} params {common.param_hash(model)}\n", end="", flush=True)  # one write per line
if args.save_params and hvd.rank() == 0:
    torch.save(model.state_dict(), args.save_params)
