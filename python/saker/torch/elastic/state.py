"""Horovod's State, ObjectState and TorchState, whose commits also persist (rank 0)."""

import copy

import torch

from .. import collectives, optimizer as _optimizer, runtime
from . import notice
from .notice import _Stop
from .sampler import ElasticSampler
from .store import _Store


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
        # Every rank looks (saker-run's run directory may be node-local, on rank 0's node
        # or not); the max over ranks stops them all if any one sees the notice.
        requested, want = notice.requested_size()
        signalled, requested, want = notice.agree(notice._received is not None, requested, want)
        if requested:
            raise _Stop(f"saker-run asks for {want or 'another number of'} ranks (resize notice)", after_commit)
        if signalled:
            raise _Stop(f"a rank received {notice._received or 'a signal'} (forwarded by saker-run)", after_commit)

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
