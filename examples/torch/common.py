"""Shared by the examples: a small CNN, generated data, the parameter hash, options."""

import argparse
import hashlib
import os
import signal
import subprocess
import time

import torch


def options(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps in all")
    p.add_argument("--batch", type=int, default=32, help="global batch (split evenly over the ranks)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ckpt-dir", default=os.environ.get("SAKER_CKPT_DIR"),
                   help="checkpoint every --ckpt-every steps and resume from the newest (default $SAKER_CKPT_DIR)")
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--save-params", help="rank 0 writes the final parameters here (torch.save)")
    return p.parse_args()


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def make_model(seed):
    torch.manual_seed(seed)
    return SmallCNN()


def batch(step, global_batch, seed, rank=0, size=1):
    """Step's global batch (28x28 images, 10 classes) is a function of the step alone, so
    a resumed run sees the same data; rank takes its contiguous share."""
    g = torch.Generator().manual_seed(seed * 100003 + step)
    x = torch.randn(global_batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (global_batch,), generator=g)
    share = global_batch // size
    return x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]


def param_hash(model):
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def maybe_fail(rank, step):
    """Fault injection for Saker's tests, on a first attempt only (not after a restart or
    a requeue): SAKER_EXAMPLE_KILL=
    "RANK:STEP" kills that rank with SIGKILL after STEP; SAKER_EXAMPLE_PREEMPT="STEP" has
    rank 0 send SIGUSR1 to saker-run (its parent under --local; "STEP:scancel": to the
    batch step, through scancel -b), which forwards it to every rank, as for a preemption."""
    if (os.environ.get("SAKER_RUN_ATTEMPT", "1") != "1" or os.environ.get("SLURM_RESTART_COUNT", "0") != "0"
            or os.path.exists(os.environ.get("SAKER_PREEMPT_MARKER", ""))):
        return
    spec = os.environ.get("SAKER_EXAMPLE_KILL")
    if spec:
        r, s = (int(v) for v in spec.split(":"))
        if r == rank and s == step:
            print(f"rank {rank}: killing myself after step {step} (SAKER_EXAMPLE_KILL)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    spec = os.environ.get("SAKER_EXAMPLE_PREEMPT")
    if spec and rank == 0 and int(spec.split(":")[0]) == step:
        print(f"rank 0: signalling saker-run after step {step} (SAKER_EXAMPLE_PREEMPT)", flush=True)
        if spec.endswith(":scancel"):
            subprocess.run(["scancel", "--signal=USR1", "-b", os.environ["SLURM_JOB_ID"]], check=True)
        else:
            os.kill(os.getppid(), signal.SIGUSR1)
        time.sleep(3)  # let the signal reach every rank before the next step boundary
