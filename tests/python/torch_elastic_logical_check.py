"""hvd.elastic.LogicalWorkers (issue 32 §2, the saker.torch opt-in): a small model with
dropout trained for 30 steps by L logical workers prints a hash of its parameters, which
must be the same bits on every world size 1..L (tests/python/torch_elastic_logical.sh).

    torch_elastic_logical_check.py L logical|elastic|plain

elastic is logical inside hvd.elastic.run with a TorchState committed every 5 steps;
LOGICAL_NOTICE=STEP:SIZE has rank 0 write SIZE into $SAKER_RESIZE_NOTICE after STEP
steps, as saker-run does to resize (every rank then stops at the next commit, exit 75,
and the same command at another size resumes from it). LOGICAL_STEPS (default 30) and
LOGICAL_SLEEP_MS (default 0, a pause per step) make a run long enough for a node to be
lost and to return under it (tests/integration/elastic_torch.sh). plain trains the way a Horovod script does (each rank its share of the batch, its own
random numbers, an allreduce of the gradients): the control whose hash follows the world
size, which shows the comparison can fail."""

import hashlib
import os
import sys
import time

import torch

import saker.torch as hvd

# BLAS may split a product's reduction by thread count; saker-run gives ranks different
# counts by the ranks per node, so fix it (LogicalWorkers' text says the same).
torch.set_num_threads(1)
hvd.init()
L, mode = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)  # the same initial weights on every rank and world size
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.Generator().manual_seed(7)
X = torch.randn(512, 16, generator=data) * torch.logspace(-3, 3, 16)  # wide magnitudes: order shows in the bits
y = torch.randint(0, 3, (512,), generator=data)
B = 64
STEPS = int(os.environ.get("LOGICAL_STEPS", "30"))
SLEEP = int(os.environ.get("LOGICAL_SLEEP_MS", "0")) / 1000


def loss_of(xb, yb):
    return torch.nn.functional.cross_entropy(model(xb), yb, reduction="sum")


workers = hvd.elastic.LogicalWorkers(L, seed=1) if mode == "logical" else None


def one_step(step):
    start = step * B % 512
    xb, yb = X[start:start + B], y[start:start + B]
    if workers is not None:
        for w in workers.mine():
            rows = workers.rows(w, B)
            with workers.rng(w, step):
                loss_of(xb[rows], yb[rows]).backward()
            workers.keep(model.parameters())
        workers.reduce(model.parameters())
    else:
        rows = slice(hvd.rank() * B // hvd.size(), (hvd.rank() + 1) * B // hvd.size())
        torch.manual_seed(1000 * step + hvd.rank())
        opt.zero_grad()
        loss_of(xb[rows], yb[rows]).backward()
        for p in model.parameters():
            p.grad = hvd.allreduce(p.grad, op=hvd.Sum) / L
    opt.step()


if mode == "elastic":
    # L lives in the committed state: a resume keeps the run's L whatever argv says.
    state = hvd.elastic.TorchState(model, opt, step=0, logical=L)
    notice = os.environ.get("LOGICAL_NOTICE")

    @hvd.elastic.run
    def train(state):
        global workers
        workers = hvd.elastic.LogicalWorkers(state.logical, seed=1)
        while state.step < STEPS:
            one_step(state.step)
            state.step += 1
            if SLEEP:
                time.sleep(SLEEP)
            if notice and hvd.rank() == 0 and int(notice.split(":")[0]) == state.step:
                with open(os.environ["SAKER_RESIZE_NOTICE"], "w") as f:
                    f.write(notice.split(":")[1] + "\n")
            if state.step % 5 == 0:
                state.commit()
                if hvd.rank() == 0:
                    print(f"committed step {state.step}/{STEPS} on {hvd.size()} ranks", flush=True)

    train(state)
else:
    for step in range(STEPS):
        one_step(step)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:32]
print(f"rank {hvd.rank()}/{hvd.size()} {mode} params {digest}", flush=True)
