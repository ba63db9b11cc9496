#!/usr/bin/python3
"""Writes the hwloc v2 XML topologies that the affinity tests use (tests/data/topo-*.xml).

Why generated: real DGX-class machines are not at hand, and hand-written XML drifts.
Each node is described below in a few lines; the script emits the same structure
lstopo would (Machine > Package > [Die] > NUMANode + Cores > PUs, and the PCI tree:
host bridges > PCIe switches > PCI devices > OS devices). Every file is then checked
with `hwloc-info --input FILE` (run: tests/data/make-topologies.py && ... see the end).

Usage: tests/data/make-topologies.py [OUTDIR]   (default: the directory of this script)
"""
import os
import subprocess
import sys

GPU_PCI = "0302 [10de:20b0] [10de:134f] a1"      # NVIDIA A100 SXM4 (3D controller)
IB_PCI = "0207 [15b3:101b] [15b3:0007] 00"       # Mellanox ConnectX-6 (InfiniBand)
ETH_PCI = "0200 [8086:1521] [8086:0001] 01"      # Intel I350 (Ethernet)
SWITCH_PCI = "0604 [10b5:8747] [0000:0000] ca"   # PLX PCIe switch port


def mask(bits):
    """hwloc bitmap string for a set of indexes: 0x0000000f, or 0xffffffff,0x00000003 ..."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append("0x%08x" % (value & 0xFFFFFFFF))
        value >>= 32
        if value == 0:
            break
    return ",".join(reversed(words))


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def gp_index(self):
        self.gp += 1
        return self.gp

    def open(self, depth, text):
        self.lines.append("  " * depth + text)


def sets(cpus, nodes):
    c, n = mask(cpus), mask(nodes)
    return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n))


def emit_pci(w, depth, bus_id, pci_type, osdevs):
    w.open(depth, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" pci_link_speed="16.000000">'
           % (w.gp_index(), bus_id, pci_type))
    for name, osdev_type, infos in osdevs:
        w.open(depth + 1, '<object type="OSDev" gp_index="%d" name="%s" osdev_type="%d">' % (w.gp_index(), name, osdev_type))
        for k, v in infos:
            w.open(depth + 2, '<info name="%s" value="%s"/>' % (k, v))
        w.open(depth + 1, '</object>')
    w.open(depth, '</object>')


def gpu(index):
    return ("gpu", index)


def ib(index):
    return ("ib", index)


def eth(name):
    return ("eth", name)


def emit_device(w, depth, bus, slot, dev):
    bus_id = "0000:%02x:%02x.0" % (bus, slot)
    kind, arg = dev
    if kind == "gpu":
        emit_pci(w, depth, bus_id, GPU_PCI, [("cuda%d" % arg, 5, [("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation")])])
    elif kind == "ib":
        emit_pci(w, depth, bus_id, IB_PCI, [("ib%d" % arg, 2, [("Address", "80:00:00:00:fe:80")]),
                                            ("mlx5_%d" % arg, 3, [("Port1State", "4"), ("Port1LID", "0x%x" % (arg + 1))])])
    else:
        emit_pci(w, depth, bus_id, ETH_PCI, [(arg, 2, [("Address", "3c:ec:ef:00:00:01")])])


def emit_host_bridge(w, depth, first_bus, switches, direct):
    """One PCI host bridge; `switches` is a list of device lists behind a PCIe switch each,
    `direct` devices sit right under the host bridge (e.g. the management NIC)."""
    last_bus = first_bus + 2 * len(switches) + len(direct)
    w.open(depth, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
           % (w.gp_index(), first_bus, last_bus))
    bus = first_bus
    for slot, dev in enumerate(direct):
        emit_device(w, depth + 1, bus, slot, dev)
    for devices in switches:
        bus += 1
        sec = bus + 1
        w.open(depth + 1, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="0000:[%02x-%02x]" '
               'pci_busid="0000:%02x:00.0" pci_type="%s" pci_link_speed="16.000000">'
               % (w.gp_index(), sec, sec, bus, SWITCH_PCI))
        for slot, dev in enumerate(devices):
            emit_device(w, depth + 2, sec, slot, dev)
        w.open(depth + 1, '</object>')
        bus = sec
    w.open(depth, '</object>')


def emit_cores(w, depth, cores, numa):
    for core_index, pus in cores:
        w.open(depth, '<object type="Core" os_index="%d" %s gp_index="%d">' % (core_index, sets(pus, [numa]), w.gp_index()))
        for pu in pus:
            w.open(depth + 1, '<object type="PU" os_index="%d" %s gp_index="%d"/>' % (pu, sets([pu], [numa]), w.gp_index()))
        w.open(depth, '</object>')


def numa_node(w, depth, numa, cpus):
    w.open(depth, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="274877906944"/>'
           % (numa, sets(cpus, [numa]), w.gp_index()))


def topology(name, packages, smt, cores_per_numa):
    """packages: list of lists of NUMA domains; each domain is (host-bridges) where a host bridge is
    (first_bus, switches, direct). Cores are numbered per NUMA domain in order; with smt=2 the
    sibling PU of core c is c + total_cores (Linux numbering)."""
    w = Writer()
    domains = [d for p in packages for d in p]
    total_cores = cores_per_numa * len(domains)
    all_pus = list(range(total_cores * smt))
    all_numas = list(range(len(domains)))

    def pus_of(core):
        return [core + k * total_cores for k in range(smt)]

    w.open(0, '<?xml version="1.0" encoding="UTF-8"?>')
    w.open(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.open(0, '<topology version="2.0">')
    c, n = mask(all_pus), mask(all_numas)
    w.open(1, '<object type="Machine" os_index="0" %s allowed_cpuset="%s" allowed_nodeset="%s" gp_index="%d">'
           % (sets(all_pus, all_numas), c, n, w.gp_index()))
    w.open(2, '<info name="Backend" value="Linux"/>')
    w.open(2, '<info name="HostName" value="%s"/>' % name)
    w.open(2, '<info name="Architecture" value="x86_64"/>')
    numa = 0
    for p_index, package in enumerate(packages):
        p_numas = list(range(numa, numa + len(package)))
        p_cores = [c for d in p_numas for c in range(d * cores_per_numa, (d + 1) * cores_per_numa)]
        p_pus = sorted(pu for core in p_cores for pu in pus_of(core))
        w.open(2, '<object type="Package" os_index="%d" %s gp_index="%d">' % (p_index, sets(p_pus, p_numas), w.gp_index()))
        die = len(package) > 1   # sub-NUMA clustering: one Die per NUMA domain
        for d_index, bridges in enumerate(package):
            cores = [(core, pus_of(core)) for core in range(numa * cores_per_numa, (numa + 1) * cores_per_numa)]
            d_pus = sorted(pu for _, pus in cores for pu in pus)
            depth = 3
            if die:
                w.open(3, '<object type="Die" os_index="%d" %s gp_index="%d">' % (d_index, sets(d_pus, [numa]), w.gp_index()))
                depth = 4
            numa_node(w, depth, numa, d_pus)
            emit_cores(w, depth, cores, numa)
            for first_bus, switches, direct in bridges:
                emit_host_bridge(w, depth, first_bus, switches, direct)
            if die:
                w.open(3, '</object>')
            numa += 1
        w.open(2, '</object>')
    w.open(1, '</object>')
    w.open(1, '<support name="discovery.pu"/>')
    w.open(1, '<support name="discovery.numa"/>')
    w.open(0, '</topology>')
    return "\n".join(w.lines) + "\n"


FIXTURES = {
    # DGX A100-like: 2 sockets x 1 NUMA x 16 cores x 2 PUs; per socket 2 PCIe switches,
    # each with 2 GPUs and 1 InfiniBand HCA; a management NIC on socket 0.
    "topo-dgx-2s-8gpu-4nic.xml": topology("dgx", [
        [[(0x00, [[gpu(0), gpu(1), ib(0)], [gpu(2), gpu(3), ib(1)]], [eth("eno1")])]],
        [[(0x80, [[gpu(4), gpu(5), ib(2)], [gpu(6), gpu(7), ib(3)]], [])]],
    ], smt=2, cores_per_numa=16),
    # 1 socket, 1 NUMA node, 8 cores x 2 PUs; GPUs 0,1 + mlx5_0 behind one switch,
    # GPUs 2,3 + mlx5_1 behind the other; the Ethernet NIC on the host bridge.
    "topo-1s-4gpu.xml": topology("quad", [
        [[(0x00, [[gpu(0), gpu(1), ib(0)], [gpu(2), gpu(3), ib(1)]], [eth("eno1")])]],
    ], smt=2, cores_per_numa=8),
    # CPU-only: 2 sockets x 1 NUMA x 4 cores x 2 PUs; an HCA on socket 1, Ethernet on socket 0.
    "topo-2s-cpu-only.xml": topology("cpu", [
        [[(0x00, [], [eth("eno1")])]],
        [[(0x80, [[ib(0)]], [])]],
    ], smt=2, cores_per_numa=4),
    # GPUs and no NICs: 1 socket split in 2 NUMA domains (sub-NUMA clustering), 4 cores each,
    # no SMT; 2 GPUs behind a switch on each domain.
    "topo-snc2-4gpu-no-nic.xml": topology("nonic", [
        [[(0x00, [[gpu(0), gpu(1)]], [])], [(0x40, [[gpu(2), gpu(3)]], [])]],
    ], smt=1, cores_per_numa=4),
    # The integration-test node: its PUs are this test machine's real CPUs 0 and 1 (2 cores,
    # 1 NUMA node) so the binding really happens; 4 GPUs in 2 switches with 1 HCA each.
    "topo-itest-2cpu-4gpu.xml": topology("itest", [
        [[(0x00, [[gpu(0), gpu(1), ib(0)], [gpu(2), gpu(3), ib(1)]], [])]],
    ], smt=1, cores_per_numa=2),
    # The srun overhead bench's node (bench/bench_affinity_srun.sh): the same 2 real CPUs,
    # 8 GPUs in 4 switches, an HCA in the first two.
    "topo-itest-2cpu-8gpu.xml": topology("itest8", [
        [[(0x00, [[gpu(0), gpu(1), ib(0)], [gpu(2), gpu(3), ib(1)], [gpu(4), gpu(5)], [gpu(6), gpu(7)]], [])]],
    ], smt=1, cores_per_numa=2),
}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, text in sorted(FIXTURES.items()):
        path = os.path.join(outdir, name)
        with open(path, "w") as f:
            f.write(text)
        # hwloc's own parser must accept every fixture (it prints the objects it found).
        subprocess.run(["hwloc-info", "--input", path], check=True, stdout=subprocess.DEVNULL)
        print("wrote", path)


if __name__ == "__main__":
    main()
