"""What stops an elastic run at its next commit: saker-run's resize notice
($SAKER_RESIZE_NOTICE) and the signals saker-run forwards, agreed on by every rank."""

import os
import signal
import stat
import sys

import torch

from .. import runtime
from ..runtime import HorovodInternalError, HostsUpdatedInterrupt

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def say(text):
    if not runtime.is_initialized() or runtime.rank() == 0:
        sys.stdout.write(f"saker.torch.elastic: {text}\n")  # one write: other ranks' lines interleave
        sys.stdout.flush()


_received = None  # the first forwarded signal's name, until run() acts on it


def _on_signal(signum, frame):
    global _received
    if _received is not None:
        # A second signal: the user (or saker-run's grace period) insists; die as by default.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _received = signal.Signals(signum).name


def install_signals():
    """Defer the signals saker-run forwards to the next commit; returns the old handlers."""
    return {s: signal.signal(s, _on_signal) for s in _SIGNALS}


def requested_size(current=None):
    """(whether $SAKER_RESIZE_NOTICE asks for a restart, the size it names or 0); `current`:
    this run's world size (default: saker.torch's).

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
            say(f"ignoring the resize notice {path}: not a regular file of uid {os.geteuid()} "
                 f"(owner uid {st.st_uid}); saker-run writes it into its private run directory")
            return False, 0
        text = f.read(64).strip()
    want = int(text) if text.isdigit() else 0
    return want != (runtime.size() if current is None else current), want


def agree(signalled, requested, want):
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
