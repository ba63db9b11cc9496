"""Horovod's training helpers: DistributedOptimizer, broadcast_parameters,
broadcast_optimizer_state, Compression.

DistributedOptimizer registers a hook on every parameter's gradient accumulator: when
autograd has finished a parameter's gradient, the hook enqueues its allreduce into Saker's
fusion buffer under the parameter's name, so communication overlaps the rest of the
backward pass, and the stall report and timeline name the model's parameters.
"""

import contextlib
import hashlib
import json
import warnings

import torch

from . import collectives, runtime
from .collectives import Average, Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401 (Horovod's names)


class _DistributedMixin:
    """Mixed in front of the user's optimizer class (so isinstance and LR schedulers keep
    working); its state lives in the same object."""

    def _saker_setup(self, named_parameters, compression, backward_passes_per_step, op, predivide, sparse_as_dense):
        collectives._check_op(op)
        if op is not Average and predivide != 1.0:
            raise ValueError("gradient_predivide_factor needs op=Average")
        params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(n, str) for n, _ in named):
                raise ValueError("named_parameters must be (name, tensor) pairs, e.g. model.named_parameters()")
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("named_parameters holds a name twice; parameter names must be unique")
            by_id = {id(p): n for n, p in named}
            unnamed = [i for i, p in enumerate(params) if id(p) not in by_id]
            if unnamed:
                raise ValueError(f"{len(unnamed)} optimizer parameter(s) are missing from named_parameters; "
                                 "pass model.named_parameters() of the model the optimizer trains")
        else:
            by_id = {id(p): f"allreduce.noname.{i}" for i, p in enumerate(params)}
        self._saker_names = by_id
        # Horovod's own attribute (scripts and its tests read it): parameter -> name.
        self._parameter_names = {p: by_id[id(p)] for p in params}
        self._saker_compression = compression
        self._saker_op = op
        self._saker_passes = backward_passes_per_step
        self._saker_predivide = predivide
        self._saker_sparse_as_dense = sparse_as_dense
        self._saker_handles = {}  # param -> collective handle
        self._saker_delay = {}  # param -> backward passes left before its allreduce
        self._saker_grad_accs = []
        self._saker_sync = True
        self._saker_synchronized = False
        if runtime.size() > 1:
            self._saker_check_model(params)
            self._saker_hook_all(params)

    def _saker_check_model(self, params):
        """Once, up front: every rank trains the same parameters (names, dtypes, shapes) with
        the same op, or every rank raises HorovodInternalError saying how they differ. At
        every step the fusion negotiation still refuses a gradient whose count, dtype or op
        differs; the gradients themselves carry no fingerprint (nothing on the hot path)."""
        described = sorted((self._saker_names[id(p)], str(p.dtype), list(p.shape)) for p in params
                           if p.requires_grad)
        digest = hashlib.sha1(json.dumps(described).encode()).hexdigest()[:12]
        collectives._verify_ordered({"kind": "DistributedOptimizer", "name": "", "dtype": "",
                                     "shape": [len(described)], "root": None, "op": self._saker_op.name,
                                     "ragged": False, "model": f"{len(described)} parameters, digest {digest}"})

    def _saker_hook_all(self, params):
        for p in params:
            if not p.requires_grad:
                continue
            self._saker_delay[p] = self._saker_passes
            # The accumulator's hook runs once autograd has written p.grad.
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._saker_make_hook(p))
            self._saker_grad_accs.append(acc)

    def _saker_make_hook(self, p):
        def hook(*_):
            if p in self._saker_handles:
                raise AssertionError(f"gradient of '{self._saker_names[id(p)]}' computed twice before step(): "
                                     "raise backward_passes_per_step, or call synchronize() in between")
            self._saker_delay[p] -= 1
            if self._saker_delay[p] == 0:
                self._saker_handles[p] = self._saker_start(p)
        return hook

    def _saker_start(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        name = self._saker_names[id(p)]
        densified = False
        if p.grad.is_sparse:
            if self._saker_sparse_as_dense:
                # Reduced dense, handed back sparse (as Horovod does): an optimizer that
                # needs sparse gradients (SparseAdam) still gets them.
                p.grad, densified = p.grad.to_dense(), True
            else:  # Horovod's sparse allreduce: every rank's indices and values, gathered
                if self._saker_op not in (Average, collectives.Sum):
                    raise ValueError(f"sparse gradient of '{name}': op {self._saker_op!r} is not Sum or Average; "
                                     "pass sparse_as_dense=True")
                return collectives.sparse_allreduce_async(p.grad, name=name, op=self._saker_op), True
        pre, post = 1.0, 1.0
        if self._saker_op is Average and self._saker_predivide != 1.0:
            pre, post = 1.0 / self._saker_predivide, self._saker_predivide
        # No per-step cross-rank check: _saker_check_model compared the parameters once, and
        # the fusion negotiation refuses a count, dtype or op that differs at every step.
        return collectives._allreduce_async(p.grad, p.grad, name, self._saker_op, pre, post, self._saker_compression,
                                            check_ranks=False), "densified" if densified else False

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those whose hooks did not fire)."""
        if runtime.size() == 1:
            self._saker_synchronized = True
            return
        missing = [p for p in self._saker_delay if p not in self._saker_handles]
        # Names, not hook order, match tensors across ranks, so any order is fine here.
        for p in missing:
            self._saker_handles[p] = self._saker_start(p)
        for p, (h, sparse) in self._saker_handles.items():
            out = collectives.synchronize(h)
            if sparse == "densified":
                p.grad = out.to_sparse()
            elif sparse:
                p.grad = out
            self._saker_delay[p] = self._saker_passes
        self._saker_handles.clear()
        self._saker_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() right after an explicit synchronize() (e.g. to clip gradients)."""
        self._saker_sync = False
        try:
            yield
        finally:
            self._saker_sync = True

    def step(self, closure=None):
        if self._saker_sync:
            if self._saker_synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are allreduced again (slower); wrap step() in "
                              "`with optimizer.skip_synchronize():`", stacklevel=2)
            self.synchronize()
        self._saker_synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._saker_handles:
            raise AssertionError("optimizer.zero_grad() while gradient allreduces are in flight: call it before "
                                 "backward(), or after step()/synchronize()")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=None):
    """Wrap optimizer so that step() applies gradients averaged over all ranks.

    Horovod's signature. named_parameters (e.g. model.named_parameters()) names each
    gradient's allreduce; without it names are positional. Gradients are accumulated
    over backward_passes_per_step backward passes before they are reduced.
    num_groups/groups are accepted and ignored: Saker's fusion buffer groups by size.
    """
    collectives._no_process_set(process_set)
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    cls = type(optimizer.__class__.__name__, (_DistributedMixin, optimizer.__class__), {})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)  # the same param_groups, defaults and state
    dist._saker_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                      sparse_as_dense)
    return dist


def _named(params):
    if isinstance(params, dict):
        return sorted(params.items())
    items = list(params)
    if items and not isinstance(items[0], tuple):
        raise ValueError("broadcast_parameters: pass model.state_dict() or model.named_parameters()")
    return items


def broadcast_parameters(params, root_rank=0):
    """Overwrite every rank's parameters (state_dict() or named_parameters()) with root_rank's.

    One cross-rank check covers them all (names, dtypes, shapes, root), before any byte moves."""
    named = [(name, p) for name, p in _named(params) if torch.is_tensor(p)]
    if runtime.size() > 1:
        described = [(name, str(p.dtype), list(p.shape)) for name, p in named]
        digest = hashlib.sha1(json.dumps(described).encode()).hexdigest()[:12]
        collectives._verify_ordered({"kind": "broadcast_parameters", "name": "", "dtype": "", "shape": [len(named)],
                                     "root": root_rank, "op": None, "ragged": False,
                                     "model": f"{len(named)} tensors, digest {digest}"})
    handles = []
    for name, p in named:
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(collectives._broadcast_async(t, t, root_rank, name, check=False))
    for h in handles:
        collectives.synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Give every rank root_rank's optimizer state (hyper-parameters and per-parameter state).

    An optimizer without state yet (no step taken) gets it first as Horovod creates it:
    zero gradients for the parameters that train, and one step of the wrapped optimizer's
    own step() (a DistributedOptimizer's step would allreduce)."""
    if not optimizer.state_dict()["state"]:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        if isinstance(optimizer, _DistributedMixin):
            super(_DistributedMixin, optimizer).step()
        else:
            optimizer.step()
    state = collectives.broadcast_object(optimizer.state_dict(), root_rank)
    if runtime.rank() != root_rank:
        optimizer.load_state_dict(state)
