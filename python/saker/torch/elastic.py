"""Horovod's elastic API (hvd.elastic) for saker-run's process model.

    import saker.torch as hvd
    hvd.init()
    ...
    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    train(state)

Horovod keeps its workers alive and re-forms the ring in process; saker-run instead
restarts every rank, at the new world size when the job was resized. So commit() keeps
Horovod's in-memory copy AND persists it (rank 0, through libsaker_ckpt: atomic,
checksummed, 0600 files in a 0700 directory, encrypted with $SAKER_CKPT_KEY), and
run() starts by restoring the newest persisted commit: restore, reset callbacks, sync
from rank 0, call the function, as Horovod does after a reset. A resize notice from
saker-run ($SAKER_RESIZE_NOTICE) or a forwarded signal (SIGTERM, SIGINT, SIGUSR1/2)
turns the next commit() or check_host_updates() into a HostsUpdatedInterrupt on every
rank alike; run() then persists the state, rank 0 sets $SAKER_PREEMPT_MARKER, and every
rank exits 75 so that saker-run starts the ranks again. See saker-torch(7).
"""

import base64
import collections
import copy
import functools
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import stat
import sys

import torch
import torch.utils.data

from . import checkpoint, collectives, optimizer as _optimizer, runtime
from .runtime import HorovodInternalError, HostsUpdatedInterrupt

_FORMAT = "saker.torch.elastic/1"
EXIT_RESTART = 75  # saker(7): interrupted, resumable; saker-run starts the ranks again
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def _say(text):
    if not runtime.is_initialized() or runtime.rank() == 0:
        sys.stdout.write(f"saker.torch.elastic: {text}\n")  # one write: other ranks' lines interleave
        sys.stdout.flush()


# ---------------------------------------------------------------- signals and the resize notice
_received = None  # the first forwarded signal's name, until run() acts on it


def _on_signal(signum, frame):
    global _received
    if _received is not None:
        # A second signal: the user (or saker-run's grace period) insists; die as by default.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _received = signal.Signals(signum).name


def _install_signals():
    """Defer the signals saker-run forwards to the next commit; returns the old handlers."""
    return {s: signal.signal(s, _on_signal) for s in _SIGNALS}


def _requested_size():
    """Rank 0: (whether $SAKER_RESIZE_NOTICE asks for a restart, the size it names or 0).

    A notice naming this very size is no request. Only a regular file of this user counts:
    saker-run writes it into its private run directory, and a notice planted by anyone
    else is ignored (it could only stop the job)."""
    path = os.environ.get("SAKER_RESIZE_NOTICE")
    if not path:
        return False, 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False, 0  # no notice (the usual case), or a symbolic link this process will not follow
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            _say(f"ignoring the resize notice {path}: not a regular file of uid {os.geteuid()} "
                 f"(owner uid {st.st_uid}); saker-run writes it into its private run directory")
            return False, 0
        text = f.read(64).strip()
    want = int(text) if text.isdigit() else 0
    return want != runtime.size(), want


def _agree(signalled, requested, want):
    """Max over ranks of (signalled, resize requested, size wanted): every rank stops at
    the same commit, whichever rank saw the signal first."""
    flags = torch.tensor([float(signalled), float(requested), float(want)], dtype=torch.float64)
    if runtime.size() > 1:
        try:
            runtime.comm().allreduce(flags.data_ptr(), 3, 1, 2)  # float64, max
        except RuntimeError as e:
            raise HorovodInternalError(f"elastic host-update check: {e}") from e
    return flags[0].item() > 0, flags[1].item() > 0, int(flags[2].item())


class _Stop(HostsUpdatedInterrupt):
    """saker-run asked for a restart (a resize notice or a forwarded signal)."""

    def __init__(self, why, after_commit):
        super().__init__(skip_sync=False)
        self.why, self.after_commit = why, after_commit
        self.args = (why,)


# ---------------------------------------------------------------- persistence (rank 0)
class _Ref:
    """Where a tensor stood in a persisted structure (the tensor is its own dataset)."""

    def __init__(self, name):
        self.name = name


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def _flatten(value, path, tensors):
    """value with each storable tensor replaced by a _Ref; tensors collects (name, host tensor)."""
    if torch.is_tensor(value) and value.layout == torch.strided and value.dtype in checkpoint._DTYPES:
        name = _UNSAFE.sub("_", path)
        while any(name == n for n, _ in tensors):
            name += "-"
        tensors.append((name, value.detach().to("cpu").contiguous()))
        return _Ref(name)
    if isinstance(value, dict):
        out = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
        for k, v in value.items():
            out[k] = _flatten(v, f"{path}.{k}", tensors)
        if hasattr(value, "_metadata"):  # a module's state_dict versions its layers there
            out = collections.OrderedDict(out)
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_flatten(v, f"{path}.{i}", tensors) for i, v in enumerate(value))
    return value


def _unflatten(value, tensors):
    if isinstance(value, _Ref):
        return tensors[value.name]
    if isinstance(value, dict):
        out = type(value)((k, _unflatten(v, tensors)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_unflatten(v, tensors) for v in value)
    return value


def _private_parent(path):
    """Create path 0700 if missing; refuse it unless it is this user's and private."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"saker.torch.elastic: refusing {path} for the elastic state: owner uid {st.st_uid}, "
                              f"mode {stat.filemode(st.st_mode)}, expected a directory of uid {os.geteuid()} with "
                              "mode drwx------ (fix: remove it, or give saker-run --ckpt-dir)")


def _directory():
    """(where commits persist, whether it outlives the node): $SAKER_ELASTIC_DIR, else
    $SAKER_CKPT_DIR/elastic (saker-run --ckpt-dir, the same for every attempt), else a
    private directory of this run id (TORCHELASTIC_RUN_ID) under $TMPDIR on rank 0's node."""
    if os.environ.get("SAKER_ELASTIC_DIR"):
        return os.environ["SAKER_ELASTIC_DIR"], True
    if os.environ.get("SAKER_CKPT_DIR"):
        return os.path.join(os.environ["SAKER_CKPT_DIR"], "elastic"), True
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if not run_id:
        return None, False
    base = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"saker-elastic-{os.geteuid()}")
    _private_parent(base)
    return os.path.join(base, _UNSAFE.sub("_", run_id)), False


class _Store:
    """Rank 0's persisted commits: saker._ckpt over one directory, keep the newest two."""

    def __init__(self):
        self.directory, self.shared = _directory()
        self.step = 0
        self._ck = None

    def _checkpointer(self):
        if self._ck is None:
            from saker import _ckpt
            self._ck = _ckpt.Checkpointer(self.directory, 0, 1, keep_last=2,
                                          key_file=os.environ.get("SAKER_CKPT_KEY", ""),
                                          policy_file=os.environ.get("SAKER_POLICY", ""), mode="0600")
        return self._ck

    def fresh_start(self):
        """A first attempt must not resume a node-local commit an earlier run (whose run id
        this one reuses, e.g. a recycled PID) left behind: drop those."""
        restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" or \
            os.environ.get("SLURM_RESTART_COUNT", "0") != "0"
        if self.shared or restarted or not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.startswith("ckpt-") and name.endswith(".h5"):
                os.unlink(os.path.join(self.directory, name))

    def discard(self):
        """After func returned: a node-local directory's commits serve no restart any more."""
        if self.shared or self.directory is None or not os.path.isdir(self.directory):
            return
        if self._ck is not None:
            self._ck.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def save(self, snapshot, world):
        tensors = []
        skeleton = _flatten(snapshot, "state", tensors)
        config = json.dumps({"format": _FORMAT, "world_size": world,
                             "meta": base64.b64encode(pickle.dumps(skeleton)).decode()})
        self.step += 1
        args = [(n, checkpoint._DTYPES[t.dtype], list(t.shape), t.data_ptr(), t.numel() * t.element_size(), False)
                for n, t in tensors]
        self._checkpointer().save(self.step, 0, config, args)
        checkpoint._note_for_saker_run(self.directory)

    def load(self):
        """(snapshot, world size it was saved at, file) of the newest commit that verifies, or None."""
        if not os.path.isdir(self.directory):
            return None
        r = self._checkpointer().load_latest()
        if r is None:
            return None
        for why in r["rejected"]:
            _say(f"skipped {why}")
        config = json.loads(r["config"])
        if config.get("format") != _FORMAT:
            raise ValueError(f"{r['file']} is a Saker checkpoint but not an elastic commit of saker.torch "
                             f"(format {config.get('format')!r}); give this run its own --ckpt-dir")
        tensors = {}
        for name, (dtype, shape, data) in r["tensors"].items():
            t = torch.frombuffer(bytearray(data), dtype=checkpoint._TORCH[dtype]) if data else \
                torch.empty(0, dtype=checkpoint._TORCH[dtype])
            tensors[name] = t.reshape(shape)
        self.step = r["step"]
        skeleton = pickle.loads(base64.b64decode(config["meta"]))
        return _unflatten(skeleton, tensors), config["world_size"], r["file"]


# ---------------------------------------------------------------- state handlers (Horovod's)
class StateHandler:
    """Saves, restores and synchronizes one object of a TorchState."""

    def __init__(self, value):
        self.value = value
        self.saved = None
        self.save()

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        state = collectives.broadcast_object(self.value.state_dict(), 0)
        if runtime.rank() != 0:
            self.value.load_state_dict(state)

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def sync(self):
        _optimizer.broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def sync(self):
        _optimizer.broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    pass  # rank 0's (epoch, processed count), loaded everywhere: reset() re-cuts the rest


class StateDictHandler(StateHandler):
    """Anything else with state_dict()/load_state_dict() (an LR scheduler, a GradScaler):
    its state travels and persists, and the object itself stays the one the script holds."""


def _handler_for(value):
    for kind, handler in ((torch.nn.Module, ModelStateHandler), (torch.optim.Optimizer, OptimizerStateHandler),
                          (ElasticSampler, SamplerStateHandler)):
        if isinstance(value, kind):
            return handler(value)
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return StateDictHandler(value)
    return None


# ---------------------------------------------------------------- State, ObjectState, TorchState
class State:
    """Horovod's State: commit(), restore(), sync(), check_host_updates(), reset callbacks."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or collectives.broadcast_object
        self._rank = get_rank or runtime.rank
        self._reset_callbacks = []
        self._store = None

    def register_reset_callbacks(self, callbacks):
        """Called after each reset: a restart of the ranks (at a new size after a resize)
        or a HorovodInternalError, before the state is synchronized."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Save in memory, persist (rank 0), then check for a resize notice or a signal:
        raises HostsUpdatedInterrupt on every rank at the same commit."""
        self.save()
        self._persist()
        self._check(after_commit=True)

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank alike when saker-run asked for a
        restart (a resize notice, or a forwarded SIGTERM/SIGINT/SIGUSR1/SIGUSR2)."""
        self._check(after_commit=False)

    def _check(self, after_commit):
        requested, want = _requested_size() if runtime.rank() == 0 else (False, 0)
        signalled, requested, want = _agree(_received is not None, requested, want)
        if requested:
            raise _Stop(f"saker-run asks for {want or 'another number of'} ranks (resize notice)", after_commit)
        if signalled:
            raise _Stop(f"a rank received {_received or 'a signal'} (forwarded by saker-run)", after_commit)

    def _persist(self):
        if runtime.rank() != 0:
            return  # sync() makes every rank rank 0's copy: rank 0's commit is the state
        if self._store is None:
            self._store = _Store()
        snapshot = self._snapshot()
        if self._store.directory is not None and snapshot is not None:
            self._store.save(snapshot, runtime.size())

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Hook for subclasses: reset objects after a reset event, before synchronization."""

    def _snapshot(self):
        """What commit() persists; None for a State subclass of the script's own, whose
        commits then stay in memory (a restart of the ranks starts it over)."""
        return None

    def _adopt(self, snapshot):
        """Take a persisted snapshot as the last commit (restore() then applies it)."""


class ObjectState(State):
    """Plain Python values given as keyword arguments, exposed as attributes."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        # A copy, not Horovod's reference: restore() must undo in-place changes (a list
        # appended to) too. Objects that cannot be copied are kept by reference.
        new_state = {}
        for attr in self._saved_state:
            value = getattr(self, attr)
            try:
                new_state[attr] = copy.deepcopy(value)
            except Exception:
                new_state[attr] = value
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            try:
                value = copy.deepcopy(value)
            except Exception:
                pass
            setattr(self, attr, value)

    def _snapshot(self):
        return {"objects": self._saved_state, "handlers": {}}

    def _adopt(self, snapshot):
        self._check_names("attribute", set(self._saved_state), set(snapshot["objects"]))
        self._saved_state = snapshot["objects"]

    @staticmethod
    def _check_names(what, here, there):
        if here != there:
            raise ValueError(f"saker.torch.elastic: the persisted commit holds {what}s {sorted(there)}, this script's "
                             f"state {sorted(here)}; the script changed between restarts (fix: restore the script, "
                             "or start over with another --ckpt-dir)")


class TorchState(ObjectState):
    """Horovod's TorchState: model and optimizer (and any keyword argument) tracked.

    Modules, optimizers, ElasticSamplers and objects with state_dict()/load_state_dict()
    (LR schedulers) are handled through their state dicts; other values are attributes."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            h = _handler_for(v)
            (handlers.__setitem__(k, h) if h else rest.__setitem__(k, v))
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**rest)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def _snapshot(self):
        snap = super()._snapshot()
        snap["handlers"] = {name: h.saved for name, h in self._handlers.items()}
        return snap

    def _adopt(self, snapshot):
        self._check_names("object", set(self._handlers), set(snapshot["handlers"]))
        for name, h in self._handlers.items():
            h.saved = snapshot["handlers"][name]
        super()._adopt(snapshot)


# ---------------------------------------------------------------- ElasticSampler
class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: the epoch's indices in one order for every world size
    (shuffled with seed + epoch), minus those already processed, dealt round robin.

    record_batch() after each batch counts the samples all ranks processed; with the
    sampler in a TorchState, a restart at another size continues where the commit was,
    without repeating or skipping samples (except the padding that makes the rest divide
    evenly among the ranks, as DistributedSampler pads). set_epoch() at the end of an epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = runtime.size()
        self.rank = runtime.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


# ---------------------------------------------------------------- run
def _resume(state):
    """Rank 0 restores the newest persisted commit; True on every rank when it did."""
    if getattr(state, "_resume_checked", False):
        return False  # a second run() in this process: its state is live, not to be rolled back
    state._resume_checked = True
    found = None
    if runtime.rank() == 0 and state._store is None:
        state._store = _Store()
    store = state._store
    if store is not None and store.directory is not None:
        store.fresh_start()
        found = store.load()
        if found is not None:
            snapshot, world, path = found
            state._adopt(snapshot)
            state.restore()
            _say(f"resumed from commit {store.step} ({path}, saved by {world} rank(s); now {runtime.size()})")
        elif os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and not store.shared:
            _say(f"restart without a commit in {store.directory} (node-local: give saker-run --ckpt-dir so that "
                 "another node can resume): starting from the beginning")
    return bool(collectives.broadcast_object(found is not None, 0))


def _stop(state, why):
    """Persist the live state (Horovod keeps it through a host update), mark, exit 75."""
    if not why.after_commit:
        state.save()
        state._persist()
    store = state._store
    if runtime.rank() == 0:
        where = f"commit {store.step} persisted in {store.directory}" if store and store.directory else \
            "nothing persisted (no directory for commits: give saker-run --ckpt-dir)"
        _say(f"{why.why}: {where}; exiting {EXIT_RESTART} so that saker-run starts the ranks again")
        marker = os.environ.get("SAKER_PREEMPT_MARKER")
        if marker:
            _write_marker(marker, store.step if store else 0)
    sys.exit(EXIT_RESTART)


def _write_marker(marker, step):
    """0600, never through a symbolic link nor into a file another user planted there."""
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise RuntimeError(f"saker.torch.elastic: refusing the preemption marker {marker}: owned by uid {st.st_uid}, "
                           "not by this user (fix: remove it; saker-run keeps it in its private run directory)")
    os.fchmod(fd, 0o600)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w") as f:
        f.write(f"{step}\n")


def run(func):
    """Horovod's hvd.elastic.run: func(state, ...) runs until it returns.

    On entry the newest persisted commit is restored (then the reset callbacks run, as
    after a reset); the state is synchronized from rank 0 and func called. A
    HorovodInternalError restores the last commit, runs the reset callbacks and calls
    func again (a lost peer makes the synchronization fail too: the error then ends the
    process, and saker-run restarts the ranks, which resume from the persisted commit).
    A HostsUpdatedInterrupt (resize notice, forwarded signal) persists the state and exits
    75 on every rank."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        previous = _install_signals()
        try:
            reset_required = _resume(state)
            while True:
                if reset_required:
                    state.on_reset()
                try:
                    state.sync()
                except HorovodInternalError as e:
                    # A peer is gone (a mismatch cannot happen here): end this process;
                    # saker-run restarts the ranks, which resume from the persisted commit.
                    _say(f"cannot synchronize the state ({e}): exiting for saker-run to restart the ranks")
                    raise
                try:
                    result = func(state, *args, **kwargs)
                    if state._store is not None:
                        state._store.discard()
                    return result
                except HorovodInternalError as e:
                    _say(f"{e}: restoring the last commit and synchronizing again")
                    state.restore()
                except HostsUpdatedInterrupt as e:
                    _stop(state, e if isinstance(e, _Stop) else _Stop("hosts updated", False))
                reset_required = True
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    return wrapper


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "StateHandler", "ModelStateHandler",
           "OptimizerStateHandler", "SamplerStateHandler", "StateDictHandler", "HostsUpdatedInterrupt",
           "HorovodInternalError"]
