#!/usr/bin/python3
"""Derives the expected affinity plan of each real topology straight from its XML.

Independent of Saker's C++ planner: it reads the XML with xml.etree (not hwloc) and
applies the rules as the issue states them (see README.md), so the planner is checked
against a second reading of the same machine. Writes expected-plans.txt, one block
per case:  == FILE ntasks=N gpus=LIST cpuset=LIST  then one line per rank.

Usage: derive-plans.py > expected-plans.txt
"""
import os
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [
    # (file, local tasks, step GPUs, job CPUs or None = the topology's allowed CPUs)
    ("hp-sl390s-3tesla-ati-ib.xml", 3, "0-2", None),
    ("hp-sl390s-3tesla-ati-ib.xml", 2, "1-2", None),
    ("hp-sl390s-3tesla-ati-ib.xml", 6, "", None),
    ("hp-sl390s-restricted-to-package0.xml", 1, "0", None),
    ("hp-sl390s-restricted-to-package0.xml", 2, "", None),
    # exported inside the cpuset, planned for a job that holds the whole machine
    ("hp-sl390s-restricted-to-package0.xml", 2, "1-2", "0-23"),
    ("cisco-ucs-usnic-manyVFs.xml", 4, "", None),
    ("cisco-ucs-usnic-manyVFs.xml", 2, "", None),
    ("cisco-ucs-usnic-manyVFs.xml", 1, "", "8-11"),
    ("cisco-b200m4-cod-4numa.xml", 2, "", None),
    ("cisco-b200m4-cod-4numa.xml", 4, "", None),
    ("cisco-b200m4-cod-4numa.xml", 8, "", None),
    ("cisco-b200m4-cod-4numa.xml", 3, "", "7-20"),
    ("nvidia-dgx2-16v100-nvswitch.xml", 16, "0-15", None),
    ("nvidia-dgx2-16v100-nvswitch.xml", 4, "8-11", None),
]


def bits(mask):
    """hwloc bitmap "0xffffffff,0x0000000f" (most significant word first) -> sorted list."""
    value = 0
    for word in mask.split(","):
        value = (value << 32) | int(word, 16)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def fmt(ids):
    ids, out, i = sorted(ids), [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else "%d-%d" % (ids[i], ids[j]))
        i = j + 1
    return ",".join(out)


def parse_list(text):
    out = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


class Topology:
    def __init__(self, path):
        self.root = ET.parse(path).getroot().find("object")
        self.parent = {c: p for p in self.root.iter() for c in p}
        self.allowed = bits(self.root.get("allowed_cpuset", self.root.get("complete_cpuset")))
        objs = list(self.root.iter("object"))
        self.cores = [bits(o.get("complete_cpuset")) for o in objs if o.get("type") == "Core"]
        self.numas = sorted((int(o.get("os_index")), o) for o in objs if o.get("type") == "NUMANode")
        pcis = [o for o in objs if o.get("type") == "PCIDev"]
        self.gpus = self.find_gpus(pcis)
        self.nics = self.find_nics(pcis)

    @staticmethod
    def osdevs(pci):
        return [(o.get("name"), int(o.get("osdev_type"))) for o in pci.findall("object") if o.get("type") == "OSDev"]

    @staticmethod
    def cls_vendor(pci):
        t = pci.get("pci_type").split()
        return int(t[0], 16), int(t[1][1:5], 16)

    def find_gpus(self, pcis):
        def compute(pci):
            for rank, prefix in enumerate(("nvml", "cuda", "rsmi")):
                for name, _ in self.osdevs(pci):
                    if name.startswith(prefix) and name[len(prefix):].isdigit():
                        return rank, int(name[len(prefix):])
            return None
        named = [p for p in pcis if compute(p)]
        if named:
            chosen = named
        else:  # no compute device in the file: 3D/other-display/accelerator of NVIDIA or AMD, NVIDIA VGA
            def by_class(p):
                cls, vendor = self.cls_vendor(p)
                return vendor in (0x10DE, 0x1002) and (cls in (0x0302, 0x0380, 0x1200) or (cls == 0x0300 and vendor == 0x10DE))
            chosen = [p for p in pcis if by_class(p)]
        vendor_rank = lambda p: 0 if self.cls_vendor(p)[1] == 0x10DE else 1
        chosen.sort(key=lambda p: (vendor_rank(p),) + (compute(p) if named else (0, 0)) + (p.get("pci_busid"),))
        return chosen

    def find_nics(self, pcis):
        out = []
        for p in sorted(pcis, key=lambda p: p.get("pci_busid")):
            cls, _ = self.cls_vendor(p)
            devs = self.osdevs(p)
            hca = next((n for n, t in devs if t == 3), None)
            net = next((n for n, t in devs if t == 2), None)
            if (cls >> 8 == 0x02 or cls == 0x0C06 or hca) and (hca or net):
                port = 1
                for o in p.iter("object"):
                    if o.get("name") == hca:
                        for info in o.findall("info"):
                            n = info.get("name")
                            if n.startswith("Port") and n.endswith("State") and info.get("value") == "4":
                                port = int(n[4:-5])
                                break
                out.append((p, hca, port, net))
        return out

    def ancestors(self, o):
        chain = [o]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain

    def hops(self, a, b):
        ca, cb = self.ancestors(a), self.ancestors(b)
        common = next(x for x in ca if x in cb)
        return ca.index(common) + cb.index(common)

    def numa_of(self, pci):
        anchor = next(x for x in self.ancestors(pci) if x.get("type") not in ("PCIDev", "Bridge", "OSDev"))
        first = bits(anchor.get("complete_nodeset"))[0]
        return [n for n, _ in self.numas].index(first)

    def numa_cores(self, i):
        pus = set(bits(self.numas[i][1].get("complete_cpuset")))
        return [c for c, p in enumerate(self.cores) if p[0] in pus]


def plan(topo, ntasks, gpus, allowed):
    allowed = set(allowed)
    ranks = [{"rank": r} for r in range(ntasks)]
    if gpus:
        order = sorted(gpus, key=lambda g: topo.numa_of(topo.gpus[g]))  # stable: PCI-tree order inside a NUMA node
        for r in ranks:
            r["gpu"] = order[r["rank"] * len(order) // ntasks]
            r["numa"] = topo.numa_of(topo.gpus[r["gpu"]])
    else:
        usable = [i for i in range(len(topo.numas)) if any(set(topo.cores[c]) & allowed for c in topo.numa_cores(i))]
        for r in ranks:
            r["numa"] = usable[r["rank"] * len(usable) // ntasks]
    for i in range(len(topo.numas)):
        members = [r for r in ranks if r["numa"] == i]
        cores = [c for c in topo.numa_cores(i) if set(topo.cores[c]) & allowed]
        if members and not cores:
            raise SystemExit("case refused: NUMA %d has no allowed core" % i)
        k, c = len(members), len(cores)
        for j, r in enumerate(members):
            mine = cores[j * c // k:(j + 1) * c // k] if c >= k else [cores[j * c // k]]
            r["cpus"] = sorted(set(pu for core in mine for pu in topo.cores[core]) & allowed)
    any_rdma = any(n[1] for n in topo.nics)
    for r in ranks:
        anchor = topo.gpus[r["gpu"]] if "gpu" in r else topo.parent[topo.numas[r["numa"]][1]]
        dist = [(topo.hops(anchor, n[0]), i) for i, n in enumerate(topo.nics) if bool(n[1]) == any_rdma]
        best = min(d for d, _ in dist) if dist else None
        r["cand"] = tuple(i for d, i in dist if d == best)
    for r in ranks:
        peers = [o for o in ranks if o["cand"] == r["cand"]]
        j, k, c = peers.index(r), len(peers), len(r["cand"])
        if c == 0:
            r["nics"] = []
        else:
            r["nics"] = [r["cand"][j * c // k]] if k >= c else list(r["cand"][j * c // k:(j + 1) * c // k])
    lines = []
    for r in ranks:
        fields = ["rank=%d" % r["rank"], "gpu=%s" % r.get("gpu", "-"), "numa=%d" % topo.numas[r["numa"]][0],
                  "cpus=" + fmt(r["cpus"])]
        if "gpu" in r:
            visible = [r["gpu"]] + [o["gpu"] for o in ranks] + list(gpus)
            visible = list(dict.fromkeys(visible))
            fields.append("CUDA_VISIBLE_DEVICES=" + ",".join(map(str, visible)))
        nics = [topo.nics[i] for i in r["nics"]]
        if any_rdma:
            fields.append("NCCL_IB_HCA==" + ",".join("%s:%d" % (n[1], n[2]) for n in nics))
        if nics:
            fields.append("UCX_NET_DEVICES=" + ",".join("%s:%d" % (n[1], n[2]) if n[1] else n[3] for n in nics))
        lines.append(" ".join(fields))
    return lines


def main():
    for name, ntasks, gpus, cpuset in CASES:
        topo = Topology(os.path.join(HERE, name))
        allowed = parse_list(cpuset) if cpuset else topo.allowed
        print("== %s ntasks=%d gpus=%s cpuset=%s" % (name, ntasks, gpus, cpuset or ""))
        for line in plan(topo, ntasks, parse_list(gpus), allowed):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
