"""Checkpoints from Python over libsaker_ckpt (saker-ckpt(5)): the guarantees saker-train has.

    from saker.torch import checkpoint
    state = checkpoint.load_latest(dir, model=model, optimizer=optimizer)   # None: start fresh
    start = state["step"] if state else 0
    for step in range(start, steps):
        ...
        checkpoint.exit_if_preempted(dir, model=model, optimizer=optimizer, step=step + 1)
        if (step + 1) % 100 == 0:
            checkpoint.save(dir, model=model, optimizer=optimizer, step=step + 1)

Every rank calls save/load_latest (they are collective when the job has several ranks).
Checkpoints are atomic (a crash leaves the previous one), checksummed and verified on
load (a damaged newest checkpoint is reported and the previous one used), encrypted with
key_file (default $SAKER_CKPT_KEY), and refused before anything is written when the site
policy (policy, default $SAKER_POLICY) forbids the directory for the lineage. Files are
written 0600 and the directories the library creates 0700; mode="0640" (default
$SAKER_CKPT_MODE) lets the group read them (0750 directories), an explicit choice. Each model
parameter and optimizer tensor is its own named HDF5 dataset ("model:conv1.weight",
"optim:0:momentum_buffer"), so h5py and saker-ckpt show the model's structure; the
rest (hyper-parameters, scalars, extra) travels pickled in the checkpoint's config.
"""

import base64
import json
import os
import pickle
import signal
import stat
import sys

import torch

from . import runtime

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64",
           torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
           torch.uint8: "uint8", torch.bool: "bool"}
_TORCH = {v: k for k, v in _DTYPES.items()}
_FORMAT = "saker.torch/1"
_checkpointers = {}  # directory -> saker._ckpt.Checkpointer (one per directory and process)


def _where():
    if runtime.is_initialized():
        return runtime.rank(), runtime.size()
    return 0, 1


def _barrier(ok):
    """Every rank's shard outcome: True only when all ranks wrote theirs."""
    failed = torch.tensor([0.0 if ok else 1.0])
    runtime.comm().allreduce(failed.data_ptr(), 1, 0, 0)
    return float(failed) == 0.0


def _checkpointer(directory, keep_last, key_file, policy, lineage, mode=None):
    key = os.path.abspath(directory)
    if key not in _checkpointers:
        from saker import _ckpt
        rank, size = _where()
        _checkpointers[key] = _ckpt.Checkpointer(
            key, rank, size, keep_last=keep_last,
            key_file=key_file if key_file is not None else os.environ.get("SAKER_CKPT_KEY", ""),
            policy_file=policy if policy is not None else os.environ.get("SAKER_POLICY", ""),
            lineage=lineage or "", barrier=_barrier if size > 1 else None,
            mode=mode if mode is not None else os.environ.get("SAKER_CKPT_MODE", "0600"))
    return _checkpointers[key]


_noted = set()  # directories already named to saker-run in this process


def _note_for_saker_run(directory):
    """Tell saker-run (SAKER_RUN_CKPT_NOTE, a file in the attempt's private run directory)
    that this program keeps its own checkpoints in directory, so that its restart message
    says the program resumes from them. Rank 0 only; best effort: a note that cannot be
    written changes only what saker-run's log says."""
    note = os.environ.get("SAKER_RUN_CKPT_NOTE")
    path = os.path.abspath(directory)
    if not note or path in _noted or _where()[0] != 0:
        return
    _noted.add(path)
    try:
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(path + "\n")
    except OSError:
        pass


def _flatten(model, optimizer, extra):
    """(named host tensors, picklable rest)."""
    tensors, meta = [], {"extra": extra}
    if model is not None:
        for name, t in model.state_dict().items():
            tensors.append(("model:" + name, t))
        meta["model_keys"] = list(model.state_dict().keys())
    if optimizer is not None:
        sd = optimizer.state_dict()
        rest = {}
        for idx, st in sd["state"].items():
            rest[idx] = {}
            for k, v in st.items():
                if torch.is_tensor(v):
                    tensors.append((f"optim:{idx}:{k}", v))
                    rest[idx][k] = None
                else:
                    rest[idx][k] = v
        meta["optimizer"] = {"param_groups": sd["param_groups"], "state": rest}
    host = []
    for name, t in tensors:
        if t.dtype not in _DTYPES:
            raise TypeError(f"checkpoint: tensor '{name}' has dtype {t.dtype}, which saker-ckpt(5) cannot store")
        host.append((name, t.detach().to("cpu").contiguous()))
    return host, meta


def _args(host):
    return [(n, _DTYPES[t.dtype], list(t.shape), t.data_ptr(), t.numel() * t.element_size(), False) for n, t in host]


def _summary(meta):
    """One line for saker-ckpt show: what the pickle holds, readable without Python (issue 31)."""
    parts = []
    if "model_keys" in meta:
        keys = meta["model_keys"]
        parts.append(f"model: {len(keys)} tensors ({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''})")
    if "optimizer" in meta:
        groups = meta["optimizer"]["param_groups"]
        settings = {k: v for k, v in (groups[0] if groups else {}).items()
                    if k != "params" and isinstance(v, (bool, int, float))}
        parts.append(f"optimizer: {len(groups)} param group(s)" +
                     "".join(f" {k}={v}" for k, v in settings.items()))
    extra = meta.get("extra")
    parts.append("extra: " + ("none" if extra is None else
                              "keys " + ", ".join(sorted(map(str, extra))) if isinstance(extra, dict) else
                              type(extra).__name__))
    return "; ".join(parts)


def _config(meta):
    # "meta" is what load() needs (a pickle); "summary" is for people (saker-ckpt show).
    return json.dumps({"format": _FORMAT, "summary": _summary(meta),
                       "meta": base64.b64encode(pickle.dumps(meta)).decode()})


def save(directory, model=None, optimizer=None, step=0, extra=None, epoch=0, keep_last=3, key_file=None,
         policy=None, lineage=None, mode=None):
    """Write step's checkpoint (collective); returns the library's report (file, bytes,
    write_s, committed on rank 0)."""
    host, meta = _flatten(model, optimizer, extra)
    ck = _checkpointer(directory, keep_last, key_file, policy, lineage, mode)
    _note_for_saker_run(directory)
    return ck.save(step, epoch, _config(meta), _args(host))


def save_async(directory, model=None, optimizer=None, step=0, extra=None, epoch=0, keep_last=3, key_file=None,
               policy=None, lineage=None, mode=None):
    """Snapshot now and write in the background (at most one save in flight; the next save
    waits for it). Returns a handle: wait() gives the report, done() polls."""
    host, meta = _flatten(model, optimizer, extra)
    ck = _checkpointer(directory, keep_last, key_file, policy, lineage, mode)
    _note_for_saker_run(directory)
    return ck.save_async(step, epoch, _config(meta), _args(host))


def load_latest(directory, model=None, optimizer=None, key_file=None, policy=None, lineage=None, mode=None):
    """Restore the newest checkpoint that verifies into model/optimizer; returns
    {"step", "epoch", "extra", "file"} or None when the directory holds none."""
    ck = _checkpointer(directory, 3, key_file, policy, lineage, mode)
    _note_for_saker_run(directory)
    r = ck.load_latest()
    if r is None:
        return None
    for why in r["rejected"]:
        print(f"saker.torch.checkpoint: skipped {why}", file=sys.stderr, flush=True)
    try:
        config = json.loads(r["config"])
        if config.get("format") != _FORMAT:
            raise ValueError(config.get("format"))
    except ValueError:
        raise ValueError(f"{r['file']} is a Saker checkpoint but not one saker.torch wrote (saker-train's?); "
                         "load it with saker-train or start from an empty --ckpt-dir") from None
    meta = pickle.loads(base64.b64decode(config["meta"]))
    tensors = {}
    for name, (dtype, shape, data) in r["tensors"].items():
        t = torch.frombuffer(bytearray(data), dtype=_TORCH[dtype]) if data else torch.empty(0, dtype=_TORCH[dtype])
        tensors[name] = t.reshape(shape)
    if model is not None:
        model.load_state_dict({k: tensors["model:" + k] for k in meta["model_keys"]})
    if optimizer is not None and "optimizer" in meta:
        state = {}
        for idx, st in meta["optimizer"]["state"].items():
            state[idx] = {k: (tensors[f"optim:{idx}:{k}"] if v is None else v) for k, v in st.items()}
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer"]["param_groups"]})
    return {"step": r["step"], "epoch": r["epoch"], "extra": meta.get("extra"), "file": r["file"]}


# ---------------------------------------------------------------- preemption
_signalled = False
_signal_name = ""  # the first signal noted, for the message


def _on_signal(signum, frame):
    global _signalled, _signal_name
    _signalled = True
    if not _signal_name:
        _signal_name = signal.Signals(signum).name


def install_preemption_handler(signals=(signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)):
    """Note the signals saker-run forwards (sbatch --signal, scancel, preemption) instead of
    dying; exit_if_preempted() acts on them at the next step boundary."""
    for s in signals:
        signal.signal(s, _on_signal)


def write_preempt_marker(step):
    """Tell saker-run that this stop left a checkpoint of `step` ($SAKER_PREEMPT_MARKER, in
    its private run directory): 0600, never through a symbolic link nor into a file another
    user planted there (as saker-train does, common/file.hpp). Nothing without the variable."""
    marker = os.environ.get("SAKER_PREEMPT_MARKER")
    if not marker:
        return
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise RuntimeError(f"saker: refusing the preemption marker {marker}: owned by uid {st.st_uid}, not by "
                           "this user (fix: remove it; saker-run keeps it in its private run directory)")
    os.fchmod(fd, 0o600)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w") as f:
        f.write(f"{step}\n")


def _resize_wanted():
    """The world size saker-run's resize notice asks for ($SAKER_RESIZE_NOTICE, written when
    it grows the job back), or 0: a torch.distributed script stops at this step boundary as
    for a preemption, and saker-run relaunches it at that size (no SIGTERM after
    --resize-wait needed)."""
    if not os.environ.get("SAKER_RESIZE_NOTICE"):
        return 0
    from .elastic.notice import requested_size  # here: the elastic package imports this module
    current = runtime.size() if runtime.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    asked, want = requested_size(current)
    return want if asked else 0


def exit_if_preempted(directory, model=None, optimizer=None, step=0, extra=None, **options):
    """Call at every step boundary on every rank (collective). When any rank received a
    preemption signal, or saker-run's resize notice asks for another world size, all ranks
    write an emergency checkpoint of step, rank 0 creates $SAKER_PREEMPT_MARKER, and the
    process exits 75 so that saker-run requeues the job or relaunches it at the new size."""
    resize = _resize_wanted()
    flag = torch.tensor([1.0 if _signalled or resize else 0.0])
    if runtime.is_initialized() and runtime.size() > 1:
        runtime.comm().allreduce(flag.data_ptr(), 1, 0, 2)  # max over ranks: all agree on the step
    if float(flag) == 0.0:
        return
    save(directory, model=model, optimizer=optimizer, step=step, extra=extra, **options)
    rank, _ = _where()
    if rank == 0:
        # Say what happened and what comes next as it is: the signal may be Ctrl-C on a
        # local run (nothing requeues it) as well as a preemption (saker-run requeues).
        why = (f"stopped by {_signal_name}" if _signal_name else
               f"stopped by saker-run's resize notice (world size {resize})" if resize else
               "stopped by a signal or resize notice on another rank")
        print(f"saker.torch.checkpoint: {why}: emergency checkpoint of step {step} committed in {directory}; "
              "exiting 75 (saker-run requeues the job inside Slurm, and stops with --local; running again "
              "resumes from it)", flush=True)
        write_preempt_marker(step)
    sys.exit(75)
