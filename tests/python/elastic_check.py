"""A Horovod elastic training script, written as Horovod's elastic docs write one, with
only the import changed (saker.torch for horovod.torch), for tests/python/torch_elastic.sh.

Training: a small MLP on generated data through an ElasticSampler and a
DistributedOptimizer, state.commit() every --batches-per-commit batches, the learning
rate scaled by hvd.size() in a reset callback. Every rank prints the parameter hash at
the end; rank 0 also checks, from the committed record of the samples each step took,
that every epoch saw every sample exactly once (across restarts and resizes).

Fault injection for the test, on the first attempt only (SAKER_RUN_ATTEMPT=1, as the
examples do): ELASTIC_KILL=RANK:STEP kills that rank (SIGKILL) after STEP batches;
ELASTIC_NOTICE=STEP:SIZE has rank 0 write SIZE into $SAKER_RESIZE_NOTICE after STEP
batches, as saker-run does to resize; ELASTIC_SIGTERM=STEP has rank 0 send SIGTERM to
saker-run (its parent under --local), which forwards it to every rank;
ELASTIC_MISMATCH=STEP has every rank broadcast from a different root after STEP batches
(in this process), which raises HorovodInternalError on every rank.
"""

import argparse
import hashlib
import os
import signal
import sys

import torch
import torch.nn.functional as F

import saker.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=48)
parser.add_argument("--batch-size", type=int, default=2, help="per rank")
parser.add_argument("--batches-per-commit", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.01)
args = parser.parse_args()

hvd.init()
torch.manual_seed(42)
torch.set_num_threads(1)

g = torch.Generator().manual_seed(7)
features = torch.randn(args.samples, 8, generator=g)
targets = torch.randn(args.samples, 1, generator=g)
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, targets)
train_sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
train_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler)

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

done = 0  # batches this process ran (fault injection counts them)
first_attempt = os.environ.get("SAKER_RUN_ATTEMPT", "1") == "1"


def say(line):
    """One write per line: the ranks share saker-run's output, and print() writes the
    line and its newline separately, so that lines of two ranks could interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def param_hash(m):
    h = hashlib.sha256()
    for name, p in sorted(m.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def inject_faults():
    if not first_attempt:
        return
    kill = os.environ.get("ELASTIC_KILL")
    if kill and [int(v) for v in kill.split(":")] == [hvd.rank(), done]:
        say(f"rank {hvd.rank()}: killing myself after {done} batches (ELASTIC_KILL)")
        os.kill(os.getpid(), signal.SIGKILL)
    notice = os.environ.get("ELASTIC_NOTICE")
    if notice and hvd.rank() == 0 and int(notice.split(":")[0]) == done:
        with open(os.environ["SAKER_RESIZE_NOTICE"], "w") as f:
            f.write(notice.split(":")[1] + "\n")
        say(f"rank 0: wrote the resize notice after {done} batches (ELASTIC_NOTICE)")
    mismatch = os.environ.get("ELASTIC_MISMATCH")
    if mismatch and int(mismatch) == done:
        say(f"rank {hvd.rank()}: broadcasting from root {hvd.rank()} after {done} batches (ELASTIC_MISMATCH)")
        hvd.broadcast(torch.zeros(1), root_rank=hvd.rank(), name="elastic.mismatch")
    term = os.environ.get("ELASTIC_SIGTERM")
    if term and hvd.rank() == 0 and int(term) == done:
        say(f"rank 0: sending SIGTERM to saker-run after {done} batches (ELASTIC_SIGTERM)")
        os.kill(os.getppid(), signal.SIGTERM)


@hvd.elastic.run
def train(state):
    global done
    while state.epoch < args.epochs:
        for index, data, target in train_loader:
            state.optimizer.zero_grad()
            loss = F.mse_loss(state.model(data), target)
            loss.backward()
            state.optimizer.step()
            # The samples this step took on every rank, recorded in the committed state.
            taken = [i for part in hvd.allgather_object(index.tolist()) for i in part]
            state.seen = state.seen + [(state.epoch, i) for i in taken]
            state.train_sampler.record_batch(state.batch, args.batch_size)
            state.batch += 1
            done += 1
            if hvd.rank() == 0:
                say(f"rank 0 at epoch {state.epoch} batch {state.batch} params {param_hash(state.model)}")
            inject_faults()
            if state.batch % args.batches_per_commit == 0:
                state.commit()
        state.epoch += 1
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch)
        state.commit()


def on_state_reset():
    # Horovod's docs: the learning rate follows the number of workers.
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()
    say(f"rank {hvd.rank()}: reset callback, size {hvd.size()}, params {param_hash(model)}")


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=0, batch=0, seen=[])
state.register_reset_callbacks([on_state_reset])
train(state)

if hvd.rank() == 0:
    for epoch in range(args.epochs):
        got = sorted(i for e, i in state.seen if e == epoch)
        if got != list(range(args.samples)):
            repeated = sorted({i for i in got if got.count(i) > 1})
            skipped = sorted(set(range(args.samples)) - set(got))
            raise SystemExit(f"epoch {epoch}: {len(got)} samples taken, repeated {repeated}, skipped {skipped}")
    say(f"sampler ok: {args.epochs} epochs, each of {args.samples} samples taken once")
say(f"rank {hvd.rank()}/{hvd.size()} params {param_hash(model)}")
