"""The cross-rank check: before a collective's bytes are trusted, the ranks compare what each
submitted (the collective, name, dtype, shape or its non-ragged part, root, op). Each rank
adds a small fingerprint of its descriptor, [1, h1, h1², h2, h2², ...] for a few short
hashes, to a Sum allreduce under a name of its own in the fusion buffer: the ranks agree
exactly when k·Σh² = (Σh)² for every hash, k being the number of ranks that took part (a
rank that called join() stands in with zeros there, which is how a join during a
broadcast or an allgather is seen). Only on a mismatch do the ranks exchange their
descriptors in full, so that every rank raises the same HorovodInternalError naming the
tensor and each rank's value. The ordered collectives wait for the check (int64, two
15-bit hashes) before their bytes move. An allreduce's fingerprint is enqueued with its
data, which never waits for it; up to 64 KiB of data it takes the
data's own dtype and op where that dtype holds its sums exactly (float32/float64/int32/
int64; three 7-bit hashes; [h, -h] for Min/Max), so that the fusion buffer fuses the two;
a larger or half-precision tensor's fingerprint goes alone (int64: fused, it would cost
the large tensor a copy through the fusion buffer; alone, it costs a 64 MiB allreduce
0.2-0.4 ms, see saker-torch(7)). The fusion negotiation itself already
refuses a different count, dtype, op or shape under one name (each allreduce passes its
tensor's dimensions), so bytes are never reinterpreted and a refused tensor, in place or
not, keeps its values. DistributedOptimizer's gradients carry no fingerprint:
it compares its parameters once, when it is built. The torch.distributed backend does not
run the check (its hot path stays as it was).
"""

import json
import zlib

import torch

from . import runtime
from ._handles import _lib, _wait
from ._ops import _DTYPES, Average, Max, Min, Sum
from .runtime import HorovodInternalError


_ROW = 64  # int64 words per rank in a mismatch report (512 bytes of JSON)
_FUSE_CHECK_BYTES = 64 << 10  # up to this size an allreduce's fingerprint is fused with its data


def _describe(kind, name, tensor, root=None, op=None, ragged=False):
    return {"kind": kind, "name": name or "", "dtype": str(tensor.dtype).replace("torch.", ""),
            "shape": list(tensor.shape), "root": root, "op": op.name if op is not None else None, "ragged": ragged}


_FINGERPRINTS = {}  # descriptor key -> hashes (a step's gradients repeat the same descriptors)


def _hashes(desc, bits, count):
    shape = desc["shape"]
    key = (desc["kind"], desc["name"], desc["dtype"], tuple(shape[1:] if desc["ragged"] else shape),
           len(shape), desc["root"], desc["op"], desc.get("model"), bits, count)
    got = _FINGERPRINTS.get(key)
    if got is None:
        if len(_FINGERPRINTS) > 10000:
            _FINGERPRINTS.clear()
        raw = json.dumps(key[:8]).encode()
        got = _FINGERPRINTS[key] = [zlib.crc32(bytes([i]) + raw) & ((1 << bits) - 1) for i in range(count)]
    return got


class _Check:
    """A fingerprint in flight (see the module's docstring). By default an int64 Sum with two
    15-bit hashes. An allreduce's fingerprint takes its data's dtype and op instead
    (float32/float64/int32/int64), so that the fusion buffer fuses it with the data: three
    7-bit hashes then, whose sums every such dtype holds exactly (Average is undone by
    multiplying by size()); for Min and Max the fingerprint is [h, -h] per hash, and the
    ranks agree when max(h) = min(h)."""

    @staticmethod
    def fuses(dtype, n):
        """Whether an allreduce of dtype on n ranks has a fingerprint of its own dtype and op."""
        return dtype in (torch.float32, torch.float64, torch.int32, torch.int64) and n <= 256

    def __init__(self, comm, tag, desc, dtype=torch.int64, op=None, extra=None):
        self.comm, self.tag, self.desc = comm, tag, desc
        self.op = op if op is not None else Sum
        n = comm.size()
        small = dtype in (torch.float32, torch.float64, torch.int32) or self.op in (Min, Max)
        if not self.fuses(dtype, n):
            dtype, self.op, small = torch.int64, Sum, False
        hs = _hashes(desc, 7 if small else 15, 3 if small else 2)
        if self.op in (Min, Max):
            vals = [v for h in hs for v in (h, -h)]
        else:
            vals = [1] + [v for h in hs for v in (h, h * h)]
        self.width = len(vals)
        self.vec = torch.tensor(vals, dtype=dtype)
        if extra is not None:  # int64 values summed over the ranks in the same round (an int64 Sum check)
            self.vec = torch.cat([self.vec, extra.reshape(-1)])
        self.handle = _lib(comm.enqueue_allreduce, tag, self.vec.data_ptr(), self.vec.numel(), _DTYPES[dtype],
                           self.op.code)

    def extra(self):
        """The extra values, summed over the ranks (after agreed())."""
        return self.vec[self.width:]

    def agreed(self, need_all):
        _wait(self.handle)
        n = self.comm.size()
        v = self.vec[: self.width].tolist()
        if self.op in (Min, Max):  # an allreduce's check: joined ranks are invisible, which is fine there
            return all(v[i] == -v[i + 1] for i in range(0, len(v), 2))
        if self.op is Average:
            v = [x * n for x in v]
        v = [int(round(x)) for x in v]
        k = v[0]
        return all(k * v[i + 1] == v[i] * v[i] for i in range(1, len(v), 2)) and (k == n or not need_all)

    def error(self):
        """Collective among the ranks that took part: each rank's descriptor, then one message."""
        n = self.comm.size()
        raw = json.dumps(self.desc).encode()
        if len(raw) > 8 * _ROW:
            short = dict(self.desc, name=self.desc["name"][:64] + "...")
            raw = json.dumps(short).encode()[: 8 * _ROW]
        table = torch.zeros(n, _ROW, dtype=torch.int64)
        row = torch.zeros(8 * _ROW, dtype=torch.uint8)
        row[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        table[self.comm.rank()] = row.view(torch.int64)
        h = _lib(self.comm.enqueue_allreduce, self.tag + "#report", table.data_ptr(), table.numel(),
                 _DTYPES[torch.int64], Sum.code)
        _wait(h)
        rows = []
        for r in range(n):
            b = table[r].view(torch.uint8).numpy().tobytes().rstrip(b"\0")
            try:
                rows.append(json.loads(b.decode()) if b else None)
            except ValueError:
                rows.append({"kind": "?", "name": "?", "dtype": "?", "shape": "?", "root": None, "op": None,
                             "ragged": False})
        return HorovodInternalError(_mismatch_message(rows))


def _mismatch_message(rows):
    present = [(r, d) for r, d in enumerate(rows) if d is not None]
    joined = [r for r, d in enumerate(rows) if d is None]
    first = present[0][1]
    names = sorted({d["name"] for _, d in present})
    kinds = sorted({d["kind"] for _, d in present})
    what = kinds[0] if len(kinds) == 1 else "collective"
    if len(names) == 1 and names[0]:
        what += f" of tensor '{names[0]}'"
    if joined:
        return (f"{what}: rank(s) {', '.join(map(str, joined))} called join(), and a {first['kind']} needs every "
                f"rank (only allreduces are stood in for after join()); call it before join() on every rank")

    def field(d, f):
        if f == "shape" and d["ragged"]:
            return f"{d['shape']} (dimension 0 may differ)"
        return d.get(f)

    parts = []
    for f in ("kind", "name", "dtype", "shape", "root", "op", "model"):
        if f == "shape":
            keys = {(len(d["shape"]), json.dumps(d["shape"][1:] if d["ragged"] else d["shape"])) for _, d in present}
        else:
            keys = {json.dumps(d.get(f)) for _, d in present}
        if len(keys) > 1:
            parts.append(f"{f} differs: " + ", ".join(f"rank {r} {field(d, f)}" for r, d in present))
    if not parts:  # the 30-bit fingerprint differed while the descriptors agree: say so
        parts.append("the ranks' descriptors differ in what was cut from this report")
    return (f"{what}: the ranks disagree ({'; '.join(parts)}); every rank must submit the same collective with the "
            "same name, dtype, shape, root and op")


_ordered = 0  # ordered collectives so far (the same count on every rank): names their checks


def _reset():
    """A new communicator counts its ordered collectives from 0 (shutdown() runs this)."""
    global _ordered
    _ordered = 0


runtime._on_shutdown.append(_reset)


def _verify_ordered(desc, extra=None):
    """Before an ordered collective (broadcast, allgather, alltoall): every rank submits the
    same one, and every rank is there (none has called join()). Raises on every rank alike.
    extra (int64), when given, is summed over the ranks in the same round and returned."""
    global _ordered
    comm = runtime.comm()
    if comm.size() == 1:
        return extra
    tag = f"saker.check/ordered.{_ordered}"
    _ordered += 1
    check = _Check(comm, tag, desc, extra=extra)
    if not check.agreed(need_all=True):
        raise check.error()
    return check.extra() if extra is not None else None


def _agree_ordered(comm):
    """After join(): ranks that raised on an ordered collective while this one had joined
    counted it, so every rank takes the highest count, and the next checks meet under one
    name."""
    global _ordered
    seq = torch.tensor([_ordered], dtype=torch.int64)
    comm.allreduce(seq.data_ptr(), 1, _DTYPES[torch.int64], Max.code)
    _ordered = int(seq)
