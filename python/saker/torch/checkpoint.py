"""Checkpoints from Python: save(dir, model=, optimizer=, step=, extra=) and load_latest(dir, ...).

Interim format until the libsaker_ckpt binding lands: one torch.save file per step,
written by rank 0 to a temporary name, fsync'ed, then renamed (atomic), with a SHA-256
of its bytes in a sidecar so that load_latest() skips a corrupt newest checkpoint and
falls back to the previous one. Not yet: sharding, encryption, residency checks
(saker-ckpt(1)'s guarantees).
"""

import hashlib
import io
import os
import re

import torch

from . import runtime

_NAME = re.compile(r"^step-(\d{9})\.pt$")


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(directory, model=None, optimizer=None, step=0, extra=None, keep=3):
    """Rank 0 writes step's checkpoint atomically; every rank returns once it is durable."""
    if runtime.is_initialized() and runtime.rank() != 0:
        runtime.comm().barrier()
        return None
    os.makedirs(directory, exist_ok=True)
    sink = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict() if model is not None else None,
                "optimizer": optimizer.state_dict() if optimizer is not None else None, "extra": extra}, sink)
    data = sink.getvalue()
    path = os.path.join(directory, f"step-{step:09d}.pt")
    _write_atomic(path + ".sha256", hashlib.sha256(data).hexdigest().encode())
    _write_atomic(path, data)
    _fsync_dir(directory)
    for old in _steps(directory)[:-keep]:
        for suffix in ("", ".sha256"):
            try:
                os.remove(os.path.join(directory, old) + suffix)
            except FileNotFoundError:
                pass
    if runtime.is_initialized():
        runtime.comm().barrier()
    return path


def _steps(directory):
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _NAME.match(n))


def load_latest(directory, model=None, optimizer=None):
    """Restore the newest checkpoint whose checksum verifies; returns its dict (step,
    extra, ...) or None when there is none. Corrupt ones are reported and skipped."""
    for name in reversed(_steps(directory)):
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
            with open(path + ".sha256", "rb") as f:
                want = f.read().decode().strip()
        except OSError as e:
            print(f"saker.torch.checkpoint: skipping {path}: {e}", flush=True)
            continue
        if hashlib.sha256(data).hexdigest() != want:
            print(f"saker.torch.checkpoint: skipping {path}: checksum mismatch (corrupt or torn write); "
                  "falling back to an older checkpoint", flush=True)
            continue
        state = torch.load(io.BytesIO(data))
        if model is not None and state["model"] is not None:
            model.load_state_dict(state["model"])
        if optimizer is not None and state["optimizer"] is not None:
            optimizer.load_state_dict(state["optimizer"])
        return state
    return None
