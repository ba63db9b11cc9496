"""Logical workers for saker.torch scripts that opt in (issue 32 §2): a run defined by L
logical workers, whose final weights are the same bits on any number of ranks 1..L.

    import saker.torch as hvd
    hvd.init()
    workers = hvd.elastic.LogicalWorkers(4, seed=1)   # L = 4, whatever the world size
    for step in range(steps):
        batch = global_batch(step)                     # the same rows on every rank
        for w in workers.mine():                       # this rank's workers, in order
            rows = workers.rows(w, len(batch))
            with workers.rng(w, step):                 # dropout etc. follow the worker
                loss_fn(model(batch[rows])).backward()
            workers.keep(model.parameters())           # its gradient; .grad cleared
        workers.reduce(model.parameters())             # canonical sum / L into .grad
        optimizer.step()                               # a plain torch optimizer

What makes it size-independent, as in saker-train (saker-train(1), Logical workers):
  - rank r of W computes the workers of a contiguous block ([L*r/W, L*(r+1)/W)), and
    worker l takes rows [l*B/L, (l+1)*B/L) of every global batch of B;
  - worker l's random numbers come from a generator seeded by (seed, l, step), not by rank;
  - the L gradients are summed in saker's canonical order (the order of a ring allreduce
    over L members: the elements split into L segments, segment s summed
    x[s] + x[s+1] + ... + x[s-1]), whatever the mapping: rank q folds the segments of its
    own workers from every worker's contribution (an alltoall moves them there), and an
    allgather shares the result. fp32 only; the division by L is the same on every rank.
In hvd.elastic.run, keep L in the TorchState (TorchState(model, optimizer, logical=L))
and make the LogicalWorkers from state.logical inside the run function: a resume then
keeps the committed L (another L sums in another order: not the same run).
Scripts that do not opt in keep DistributedOptimizer, whose sum follows the transport.
Fix torch's intra-op threads (torch.set_num_threads) to one count for every world size:
BLAS may split a product's reduction by thread count, and saker-run sizes ranks' thread
counts by the ranks per node.
Modules whose forward updates state (BatchNorm's running statistics) see the workers of
a rank one after another, so such state is not size-independent: keep it out (eval-mode
BatchNorm, GroupNorm, LayerNorm) or synchronise it yourself.
"""

import contextlib
import hashlib

import torch

from .. import collectives, runtime


def even_split(count, parts):
    """libsaker_comm's Ring::even_split: part i gets count // parts, the first count % parts
    one more; returns the parts + 1 boundaries."""
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + count // parts + (1 if i < count % parts else 0))
    return bounds


def canonical_sum(parts):
    """The canonical-order sum of the rows of `parts` (L x n, fp32): saker's order, the same
    bits as libsaker_comm's canonical_sum for the same contributions."""
    logical, n = parts.shape
    out = torch.empty(n, dtype=torch.float32)
    seg = even_split(n, logical)
    for s in range(logical):
        b, e = seg[s], seg[s + 1]
        acc = parts[s, b:e].clone()
        for k in range(1, logical):
            acc.add_(parts[(s + k) % logical, b:e])  # acc + x: an fp32 addition, either operand order
        out[b:e] = acc
    return out


class LogicalWorkers:
    """L logical workers over this job's ranks (see the module's text). Collective: every
    rank makes it with the same L and seed, and calls reduce() at the same steps."""

    def __init__(self, logical, seed=0):
        world = runtime.size()
        if not isinstance(logical, int) or logical < 1:
            raise ValueError(f"LogicalWorkers({logical!r}): L must be an int of 1 or more; pass the first run's world size")
        if world > logical:
            raise ValueError(f"{world} ranks for {logical} logical workers: every rank computes at least one; "
                             f"run on at most {logical} ranks, or start a new run with a larger L")
        self.logical, self.seed = logical, int(seed)
        self.world, self.rank = world, runtime.rank()
        self._kept = []

    def first(self, rank):
        return self.logical * rank // self.world

    def mine(self):
        """This rank's logical workers, in logical order."""
        return range(self.first(self.rank), self.first(self.rank + 1))

    def rows(self, worker, batch_size):
        """The slice of a global batch of batch_size rows that logical worker `worker` takes."""
        if batch_size < self.logical:
            raise ValueError(f"a global batch of {batch_size} rows for {self.logical} logical workers: "
                             "each needs at least one row; raise the batch size")
        return slice(worker * batch_size // self.logical, (worker + 1) * batch_size // self.logical)

    def generator_seed(self, worker, step):
        digest = hashlib.sha256(f"saker-logical {self.seed} {worker} {step}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    @contextlib.contextmanager
    def rng(self, worker, step):
        """torch's CPU generator seeded by (seed, worker, step) inside, restored after."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.generator_seed(worker, step))
            yield

    def keep(self, params):
        """After one worker's backward: keep its gradient (fp32, flat; zeros where a
        parameter has none) and clear .grad for the next worker."""
        params = list(params)
        if len(self._kept) >= len(self.mine()):
            raise RuntimeError(f"keep() called {len(self._kept) + 1} times this step, but this rank computes "
                               f"{len(self.mine())} logical worker(s); call reduce() once per step")
        flat = []
        for i, p in enumerate(params):
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {i} is {p.dtype}: the canonical order is defined for fp32 sums; "
                                "train in fp32 (or keep an fp32 master copy) to use LogicalWorkers")
            g = p.grad
            flat.append(torch.zeros(p.numel()) if g is None else g.detach().reshape(-1).to("cpu", copy=True))
            p.grad = None
        self._kept.append(torch.cat(flat) if flat else torch.zeros(0))

    def reduce(self, params, average=True):
        """Collective: every worker's kept gradient summed in the canonical order (divided
        by L with average) into each parameter's .grad."""
        params = list(params)
        if len(self._kept) != len(self.mine()):
            raise RuntimeError(f"reduce() after {len(self._kept)} keep() call(s), but this rank computes "
                               f"{len(self.mine())} logical worker(s): call keep() after each worker's backward")
        mine = torch.stack(self._kept) if self._kept else torch.zeros(0, 0)
        self._kept = []
        total = self._sum(mine)
        if average:
            total.div_(self.logical)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = total[offset:offset + n].view_as(p).to(p.device)
            offset += n
        return total

    def _sum(self, mine):
        """The canonical sum of all L rows, this rank holding `mine` (its workers' rows)."""
        if self.world == 1:
            return canonical_sum(mine)
        n = mine.shape[1]
        seg = even_split(n, self.logical)
        lo = [seg[self.first(q)] for q in range(self.world)]
        length = [seg[self.first(q + 1)] - lo[q] for q in range(self.world)]
        width = max(length)
        # To each rank q, each of my workers' elements of q's segments (padded to one width).
        send = torch.zeros(self.world * mine.shape[0], width)
        for q in range(self.world):
            for j in range(mine.shape[0]):
                send[q * mine.shape[0] + j, :length[q]] = mine[j, lo[q]:lo[q] + length[q]]
        got = collectives.alltoall(send, splits=torch.tensor([mine.shape[0]] * self.world, dtype=torch.int32),
                                   name="saker.logical.reduce")
        recv = got[0] if isinstance(got, tuple) else got  # L rows: the workers in logical order
        me = self.rank
        reduced = torch.zeros(1, width)
        for s in self.mine():
            b, e = seg[s] - lo[me], seg[s + 1] - lo[me]
            acc = recv[s, b:e].clone()
            for k in range(1, self.logical):
                acc.add_(recv[(s + k) % self.logical, b:e])
            reduced[0, b:e] = acc
        gathered = collectives.allgather(reduced, name="saker.logical.gather")
        out = torch.empty(n, dtype=torch.float32)
        for q in range(self.world):
            out[lo[q]:lo[q] + length[q]] = gathered[q, :length[q]]
        return out
