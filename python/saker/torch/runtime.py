"""The process's communicator: init/shutdown and where this rank sits (Horovod's names)."""

import os
import socket

_comm = None  # saker._comm.Communicator once init() ran
_cross = (0, 1)  # (cross_rank, cross_size): this rank's node among the job's nodes
# Where the next init() meets the other ranks once shutdown() ran: (host, port, rank, size)
# of a fresh Saker store that rank 0 serves (the launcher's store still holds the first
# generation's rendezvous keys, which a second bootstrap would read as its own).
_next = None
_servers = []  # the stores this rank serves for the current and the next generation
_on_shutdown = []  # callables that reset per-communicator state (collectives' counters)


class NotInitializedError(ValueError):
    """Raised when a call needs saker.torch.init() first (Horovod raises ValueError too)."""


class HorovodInternalError(RuntimeError):
    """Horovod's exception for a collective that failed: a peer died or timed out, or the
    ranks disagreed on a tensor's name, type, shape, op or root (the message names each
    rank's value). Elastic training scripts catch it to restore their last commit."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's exception for hosts added or removed under elastic training: the
    commit() of saker.torch.elastic raises it on every rank when saker-run asks for a
    restart (a resize notice or a forwarded signal), and elastic.run() handles it."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


def _place(comm):
    """Nodes are numbered in the order their first rank appears (Horovod's cross_rank)."""
    nodes = []
    for r in range(comm.size()):
        h = comm.host_of(r)
        if h not in nodes:
            nodes.append(h)
    mine = nodes.index(comm.host_of(comm.rank()))
    # Node identity may come from SAKER_NODE_ID (several "nodes" on one host): the
    # library's node count is the truth then, and a rank's node is rank // local_size.
    if len(nodes) != comm.node_count():
        return comm.rank() // max(comm.local_size(), 1), comm.node_count()
    return mine, len(nodes)


def adopt(comm):
    """Make comm the process's communicator (the torch.distributed backend shares it)."""
    global _comm, _cross
    _comm = comm
    _cross = _place(comm)


def init(comm=None, process_sets=None):
    """Bootstrap the communicator from the environment (saker-run, srun, SAKER_STORE).

    Idempotent, like hvd.init(). Rendezvous follows saker-comm(3): PMI2 under
    ``srun --mpi=pmi2`` (what saker-run uses inside a job), a Slurm step's TCP store
    under plain srun, else SAKER_STORE / MASTER_ADDR:MASTER_PORT (saker-run --local).
    """
    if comm is not None:
        raise NotImplementedError("saker.torch.init(comm=...): sub-communicators are not supported; "
                                  "launch the ranks you want as their own job step instead")
    if process_sets is not None:
        raise NotImplementedError("saker.torch.init(process_sets=...): process sets are not supported; "
                                  "use one job step per group of ranks")
    global _next
    if _comm is not None:
        return
    from saker import _comm as ext
    if _next is not None:
        host, port, r, n = _next
        _next = None
        adopt(ext.Communicator.over_tcp_store(host, port, r, n, node_identity(), socket.gethostname()))
        del _servers[:-1]  # the store of the generation before this one has no client left
    else:
        adopt(ext.Communicator.from_environment())


def _next_generation(comm):
    """Collective, over the communicator about to go: rank 0 serves a fresh store on a free
    port and every rank learns its address; then no rank still uses comm."""
    from saker import _comm as ext
    import torch
    addr = torch.zeros(256, dtype=torch.uint8)
    if comm.rank() == 0:
        server = ext.TcpStoreServer(0)
        _servers.append(server)
        host = os.environ.get("SAKER_COMM_ADDR") or os.environ.get("MASTER_ADDR") or socket.gethostname()
        raw = f"{host}:{server.port()}".encode()[:255]
        addr[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    comm.broadcast(addr.data_ptr(), addr.numel(), 0)
    comm.barrier()  # every rank is done with comm: tearing it down resets no one's link
    host, port = bytes(addr.tolist()).rstrip(b"\0").decode().rsplit(":", 1)
    return host, int(port), comm.rank(), comm.size()


def shutdown():
    """Tear the communicator down (joins its threads); init() may be called again.

    Collective when more than one rank runs, as in Horovod (every rank calls it): the
    ranks agree on where the next init() meets, then each drops its communicator."""
    global _comm, _cross, _next
    comm = _comm
    _comm, _cross = None, (0, 1)
    if comm is None:
        for reset in _on_shutdown:
            reset()
        return
    _next = None
    if comm.size() > 1:
        try:
            _next = _next_generation(comm)
        except RuntimeError as e:  # a peer is gone: the next init() bootstraps from the environment
            import sys
            print(f"saker.torch: shutdown() could not agree on the next rendezvous with every rank ({e}); "
                  "a later init() bootstraps from the environment", file=sys.stderr, flush=True)
    del comm  # the last reference (unless torch.distributed's process group holds one): threads joined
    # Only now drop the per-communicator state: it holds the buffers of operations submitted
    # and never synchronized, which the library's threads may still write into until the
    # communicator is gone (freed first, they corrupted the heap: Horovod's duplicate-name
    # test leaves such an allreduce in flight at shutdown()).
    for reset in _on_shutdown:
        reset()


def is_initialized():
    return _comm is not None


def comm():
    if _comm is None:
        raise NotInitializedError("saker.torch has not been initialized; call saker.torch.init() first")
    return _comm


def rank():
    return comm().rank()


def size():
    return comm().size()


def local_rank():
    return comm().local_rank()


def local_size():
    return comm().local_size()


def cross_rank():
    comm()
    return _cross[0]


def cross_size():
    comm()
    return _cross[1]


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    return size() == local_size() * cross_size()


def node_identity():
    """The node name libsaker_comm uses to decide which ranks share /dev/shm."""
    return os.environ.get("SAKER_NODE_ID") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


# Horovod's build-introspection functions, answered truthfully for Saker.
def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False
