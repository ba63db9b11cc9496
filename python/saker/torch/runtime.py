"""The process's communicator: init/shutdown and where this rank sits (Horovod's names)."""

import os
import socket

_comm = None  # saker._comm.Communicator once init() ran
_cross = (0, 1)  # (cross_rank, cross_size): this rank's node among the job's nodes


class NotInitializedError(ValueError):
    """Raised when a call needs saker.torch.init() first (Horovod raises ValueError too)."""


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
    if _comm is not None:
        return
    from saker import _comm as ext
    adopt(ext.Communicator.from_environment())


def shutdown():
    """Tear the communicator down (joins its threads); init() may be called again."""
    global _comm, _cross
    _comm, _cross = None, (0, 1)


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
