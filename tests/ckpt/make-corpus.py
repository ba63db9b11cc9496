#!/usr/bin/python3
"""The attacker's corpus: mutated copies of REAL checkpoint directories (saker-train's).

    make-corpus.py SETS_DIR OUT_DIR [--full]

SETS_DIR holds one checkpoint directory per set (plain1, plain2, enc1, enc2: 1 or 2
ranks, plain or encrypted) plus foreign2/foreign1 (another run, same steps and world
size). Each case is OUT_DIR/<set>.<case>/, a copy of the set with its NEWEST checkpoint
damaged one way. corpus.sh resumes each case and checks that it either falls back to an
older checkpoint or ignores a harmless change, always with the uninterrupted run's hash.

Classes (issue 12): truncations; bit flips over every region of the file (user block
and manifest, superblock, object headers, B-trees, heaps, data: offsets sampled across
the file; with --full every byte of the header, every 3rd of the manifest, every 2nd of
the superblock and root object header, every 17th of the rest: about 13000 cases, most
of an hour on two cores); every HDF5
attribute edited; tensors swapped with their checksums; shards swapped, foreign,
missing and extra; renames; encryption markers removed; an encrypted tensor replaced by
another checkpoint's plaintext and checksum. Without --full a fixed sample (seeded).
"""
import os
import random
import re
import shutil
import sys

import h5py
import numpy as np

MAIN = re.compile(r"^ckpt-(\d{12})\.h5$")


def steps(d):
    return sorted(int(MAIN.match(f).group(1)) for f in os.listdir(d) if MAIN.match(f))


def main_name(step):
    return "ckpt-%012d.h5" % step


def shard_name(step, rank):
    return "ckpt-%012d.shard-%05d.h5" % (step, rank)


class Corpus:
    def __init__(self, sets, out, full):
        self.sets, self.out, self.full = sets, out, full
        self.count = 0

    def case(self, set_name, name):
        """A fresh copy of the set; returns (case dir, newest step)."""
        d = os.path.join(self.out, "%s.%s" % (set_name, re.sub(r"[^A-Za-z0-9_.-]", "_", name)))
        shutil.copytree(os.path.join(self.sets, set_name), d)
        self.count += 1
        return d, steps(d)[-1]

    # ---------------------------------------------------------------- byte level

    def flip(self, set_name, fname_of, offsets, label):
        for off in offsets:
            d, newest = self.case(set_name, "%s-flip-%d" % (label, off))
            path = os.path.join(d, fname_of(newest))
            with open(path, "r+b") as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ (1 << (off % 8))]))

    def truncations(self, set_name, fname_of, size, label, rng):
        points = {0, 1, 79, 80, 4095, 4096, size // 2, size - 1}
        points |= {rng.randrange(size) for _ in range(40 if self.full else 4)}
        for n in sorted(p for p in points if 0 <= p < size):
            d, newest = self.case(set_name, "%s-trunc-%d" % (label, n))
            os.truncate(os.path.join(d, fname_of(newest)), n)

    def byte_level(self, set_name, rng):
        d0 = os.path.join(self.sets, set_name)
        newest = steps(d0)[-1]
        files = [(main_name, "main")]
        world = 2 if set_name.endswith("2") else 1
        if world == 2:
            files.append((lambda s: shard_name(s, 1), "shard1"))
        for fname_of, label in files:
            size = os.path.getsize(os.path.join(d0, fname_of(newest)))
            # Regions: header + manifest (user block), HDF5 superblock and root object
            # header, the rest (object headers, B-trees, heaps, data), the last bytes.
            offs = set()
            if self.full:
                with open(os.path.join(d0, fname_of(newest)), "rb") as f:
                    head = f.read(32)
                manifest_end = 80 + int.from_bytes(head[24:32], "little")
                offs |= set(range(0, 80))                             # header: every byte
                offs |= set(range(80, min(size, manifest_end), 3))    # manifest: every 3rd byte
                offs |= set(range(4096, min(size, 4096 + 800), 2))    # superblock, root object header
                offs |= set(range(0, size, 17))                       # every 17th byte of the rest
            else:
                offs |= {0, 13, 17, 25, 33, 50, 70, 80, 100, 200, 300, 4096, 4100, 4104, 4200, 4400, size - 1}
                offs |= {rng.randrange(4096, size) for _ in range(24)}
            self.flip(set_name, fname_of, sorted(o for o in offs if o < size), label)
            self.truncations(set_name, fname_of, size, label, rng)

    # ---------------------------------------------------------------- HDF5 level (h5py)

    def attributes(self, set_name):
        d0 = os.path.join(self.sets, set_name)
        newest = steps(d0)[-1]
        found = []
        with h5py.File(os.path.join(d0, main_name(newest)), "r") as f:
            found += [("/", k) for k in f.attrs]

            def visit(name, obj):
                found.extend((name, k) for k in obj.attrs)
            f.visititems(visit)
        for obj, key in found:
            d, newest = self.case(set_name, "attr-%s-%s" % (obj.strip("/"), key))
            with h5py.File(os.path.join(d, main_name(newest)), "r+") as f:
                o = f[obj]
                v = o.attrs[key]
                if isinstance(v, h5py.Empty):
                    o.attrs[key] = np.array([1], dtype=np.uint64)
                elif isinstance(v, (bytes, np.bytes_)):
                    o.attrs[key] = np.bytes_(bytes(v)[::-1] + b"x")
                elif isinstance(v, np.ndarray):
                    o.attrs[key] = v + 1 if v.size else np.array([1], dtype=np.uint64)
                else:
                    o.attrs[key] = v + 1
        # Encryption markers removed (every tensor's `encryption` attribute, and the root's).
        if set_name.startswith("enc"):
            d, newest = self.case(set_name, "unmark-encryption")
            with h5py.File(os.path.join(d, main_name(newest)), "r+") as f:
                f.attrs["encryption"] = np.bytes_(b"none")
                for ds in f["shard_00000/tensors"].values():
                    if "encryption" in ds.attrs:
                        del ds.attrs["encryption"]

    def tensors(self, set_name):
        d, newest = self.case(set_name, "swap-tensors")
        with h5py.File(os.path.join(d, main_name(newest)), "r+") as f:
            t = f["shard_00000/tensors"]
            same = {}
            for name, ds in t.items():
                same.setdefault((ds.shape, ds.dtype.str), []).append(name)
            pair = next((v[:2] for v in same.values() if len(v) >= 2), None)
            if pair:
                a, b = t[pair[0]], t[pair[1]]
                va, vb = a[()], b[()]
                a[...] = vb
                b[...] = va
                ca, cb = a.attrs["xxh3_128"], b.attrs["xxh3_128"]
                a.attrs["xxh3_128"], b.attrs["xxh3_128"] = cb, ca
        if set_name.startswith("enc"):
            # An encrypted tensor replaced by the plain run's bytes and checksum.
            plain = os.path.join(self.sets, "plain" + set_name[-1])
            d, newest = self.case(set_name, "plaintext-for-ciphertext")
            with h5py.File(os.path.join(plain, main_name(newest)), "r") as p, \
                    h5py.File(os.path.join(d, main_name(newest)), "r+") as f:
                for name, ds in p["shard_00000/tensors"].items():
                    t = f["shard_00000/tensors"]
                    del t[name]
                    t.create_dataset(name, data=ds[()])
                    for k, v in ds.attrs.items():
                        t[name].attrs[k] = v

    def shards(self, set_name):
        if not set_name.endswith("2"):
            return
        d, newest = self.case(set_name, "shard-missing")
        os.remove(os.path.join(d, shard_name(newest, 1)))
        d, newest = self.case(set_name, "shard-extra")  # harmless: no rank 2 in a world of 2
        shutil.copy(os.path.join(d, shard_name(newest, 1)), os.path.join(d, shard_name(newest, 2)))
        d, newest = self.case(set_name, "shard-foreign")  # another run, same step and world size
        foreign = os.path.join(self.sets, "foreign2" if set_name == "plain2" else "foreignenc2")
        if os.path.isdir(foreign):
            shutil.copy(os.path.join(foreign, shard_name(newest, 1)), os.path.join(d, shard_name(newest, 1)))
        d, newest = self.case(set_name, "shard-stale")  # an older step's shard under the newest's name
        older = steps(d)[-2]
        shutil.copy(os.path.join(d, shard_name(older, 1)), os.path.join(d, shard_name(newest, 1)))
        d, newest = self.case(set_name, "shard-as-main")  # shard and main swapped
        a, b = os.path.join(d, main_name(newest)), os.path.join(d, shard_name(newest, 1))
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)

    def renames(self, set_name):
        d, newest = self.case(set_name, "rename-newest-to-later")
        os.rename(os.path.join(d, main_name(newest)), os.path.join(d, main_name(newest + 5)))
        d, newest = self.case(set_name, "rename-older-over-newest")
        older = steps(d)[-2]
        os.replace(os.path.join(d, main_name(older)), os.path.join(d, main_name(newest)))
        d, newest = self.case(set_name, "main-foreign")  # another run's main file, same step
        foreign = os.path.join(self.sets, "foreign" + set_name[-1] if set_name.startswith("plain") else "foreignenc" + set_name[-1])
        if os.path.isdir(foreign):
            shutil.copy(os.path.join(foreign, main_name(newest)), os.path.join(d, main_name(newest)))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    corpus = Corpus(args[0], args[1], "--full" in sys.argv)
    rng = random.Random(12)
    for s in ("plain1", "plain2", "enc1", "enc2"):
        if not os.path.isdir(os.path.join(args[0], s)):
            continue
        corpus.byte_level(s, rng)
        corpus.attributes(s)
        corpus.tensors(s)
        corpus.shards(s)
        corpus.renames(s)
    print("make-corpus: %d cases in %s" % (corpus.count, args[1]))


if __name__ == "__main__":
    main()
