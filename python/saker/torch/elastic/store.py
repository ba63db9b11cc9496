"""Rank 0's persisted commits: one libsaker_ckpt checkpoint per commit (saker-ckpt(5))."""

import base64
import collections
import copy
import json
import os
import pickle
import re
import shutil
import stat
import threading

import torch

from .. import checkpoint
from .notice import say as _say

_FORMAT = "saker.torch.elastic/1"


class _Ref:
    """Where a tensor stood in a persisted structure (the tensor is its own dataset)."""

    def __init__(self, name):
        self.name = name


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def _flatten(value, path, tensors):
    """value with each storable tensor replaced by a _Ref; tensors collects {name: host tensor}
    (each its own dataset, named after where it stood: state.handlers.model.fc.weight)."""
    if torch.is_tensor(value) and value.layout == torch.strided and value.dtype in checkpoint._DTYPES:
        name = _UNSAFE.sub("_", path)
        while name in tensors:  # two keys that differ only in unsafe characters
            name += "-"
        tensors[name] = value.detach().to("cpu").contiguous()
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
    """Rank 0's persisted commits: saker._ckpt over one directory, keep the newest two.

    A commit is copied into host memory at once and written in the background while
    training goes on (at most one write in flight: the next commit waits for it), so a
    commit costs about what Horovod's in-memory one does; a restart resumes from the
    newest commit whose write completed."""

    def __init__(self):
        self.directory, self.shared = _directory()
        self.step = 0
        self._ck = None
        self._pending = None  # the handle of the write in flight

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
        if not self.shared and not restarted:
            shutil.rmtree(self.directory, ignore_errors=True)  # this run id's own private directory

    def flush(self):
        """Wait for the write in flight (before the process stops); raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            writer, outcome, _ = pending
            writer.join()
            if "error" in outcome:
                raise outcome["error"]

    def discard(self):
        """After func returned: a node-local directory's commits serve no restart any more."""
        self.flush()
        if not self.shared and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def save(self, snapshot, world):
        tensors = {}
        skeleton = _flatten(snapshot, "state", tensors)
        config = json.dumps({"format": _FORMAT, "world_size": world,
                             "meta": base64.b64encode(pickle.dumps(skeleton)).decode()})
        self.step += 1
        args = [(n, checkpoint._DTYPES[t.dtype], list(t.shape), t.data_ptr(), t.numel() * t.element_size(), False)
                for n, t in tensors.items()]
        self.flush()  # the previous commit's write error surfaces here, not at a restart
        ck, step, outcome = self._checkpointer(), self.step, {}

        def write():  # the library's save releases the GIL while it writes
            try:
                ck.save(step, 0, config, args)
            except BaseException as e:  # handed to flush(), in the training thread
                outcome["error"] = e

        # The tensors are the commit's own copies (nothing changes them), kept alive here
        # until written. Not a daemon: a process that ends meanwhile still lands the commit.
        writer = threading.Thread(target=write, name="saker-elastic-commit")
        writer.start()
        self._pending = (writer, outcome, tensors)
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
