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

import functools
import os
import signal
import sys

from .. import collectives, runtime
from ..checkpoint import write_preempt_marker
from ..runtime import HorovodInternalError, HostsUpdatedInterrupt
from .notice import _Stop, install_signals, say as _say
from .sampler import ElasticSampler
from .logical import LogicalWorkers, canonical_sum
from .state import (State, ObjectState, TorchState, StateHandler, ModelStateHandler, OptimizerStateHandler,
                    SamplerStateHandler, StateDictHandler)
from .store import _Store

EXIT_RESTART = 75  # saker(7): interrupted, resumable; saker-run starts the ranks again


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
    if store is not None:
        store.flush()  # the commit is on disk before saker-run is told it is
    if runtime.rank() == 0:
        where = f"commit {store.step} persisted in {store.directory}" if store and store.directory else \
            "nothing persisted (no directory for commits: give saker-run --ckpt-dir)"
        _say(f"{why.why}: {where}; exiting {EXIT_RESTART} so that saker-run starts the ranks again")
        write_preempt_marker(store.step if store else 0)
    sys.exit(EXIT_RESTART)


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
        previous = install_signals()
        try:
            reset_required = _resume(state)
            while True:
                if reset_required:
                    state.on_reset()
                try:
                    state.sync()
                except HorovodInternalError as e:
                    # Most likely a peer is gone: end this process;
                    # saker-run restarts the ranks, which resume from the persisted commit.
                    _say(f"cannot synchronize the state ({e}): exiting for saker-run to restart the ranks")
                    raise
                try:
                    result = func(state, *args, **kwargs)
                    if state._store is not None:
                        state._store.discard()  # waits for the last write; node-local ones removed
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


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "LogicalWorkers", "canonical_sum", "StateHandler", "ModelStateHandler",
           "OptimizerStateHandler", "SamplerStateHandler", "StateDictHandler", "HostsUpdatedInterrupt",
           "HorovodInternalError"]
