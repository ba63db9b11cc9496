"""Horovod's barrier and join."""

from . import runtime
from ._check import _agree_ordered
from ._process_sets import _no_process_set
from .runtime import HorovodInternalError


def barrier(process_set=None):
    _no_process_set(process_set)
    try:
        runtime.comm().barrier()
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e


def join(device=-1):
    """Horovod's join: this rank ran out of data. Until every rank has joined, it stands in
    for each named allreduce the others run (DistributedOptimizer's gradients, allreduce
    with or without a name), contributing zeros (Average still divides by size()), or the
    type's largest/lowest value for Min/Max. Returns the rank that joined last. A
    broadcast, allgather or alltoall that the other ranks run meanwhile raises on them
    (they need every rank). device is accepted for Horovod compatibility (tensors are
    staged through host memory)."""
    if not isinstance(device, int):
        raise TypeError(f"join(device={device!r}): device is a CUDA device index or -1")
    comm = runtime.comm()
    try:
        last = comm.join()
        _agree_ordered(comm)
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e
    return last
