"""Horovod's tensor collectives over libsaker_comm: the API, gathered from the modules that
implement it, one concept each.

Allreduces go through Saker's fusion buffer under a name (the caller's, or a counter's
when none is given), so named tensors may be submitted in any order across ranks and a
name some rank never submits shows up in the stall report. Broadcasts, allgathers and
alltoalls run in submission order, as in MPI. Tensors live in host memory; device tensors
are staged through a host copy. Before a collective's bytes are trusted the ranks compare
what each submitted, and a mismatch raises the same HorovodInternalError on every rank.

    _ops            reduction ops, dtypes, Horovod's scaling rules
    compression     Compression.none / .fp16
    _process_sets   global_process_set (the only one)
    _handles        handles, synchronize/poll, async ordered collectives' start order
    _check          the cross-rank check (fingerprints, the mismatch report)
    _allreduce      allreduce (and grouped, async, in place), Product
    _broadcast      broadcast, broadcast_object
    _allgather      allgather, grouped_allgather, allgather_object
    _sparse         sparse_allreduce_async (over allgather)
    _alltoall       alltoall
    _reducescatter  reducescatter, grouped_reducescatter
    _sync           barrier, join

A module imports only those above it in this list, and none imports the optimizer, which
imports this module (no cycle).
"""

from ._allgather import allgather, allgather_async, allgather_object, grouped_allgather, grouped_allgather_async
from ._allreduce import (allreduce, allreduce_, allreduce_async, allreduce_async_, grouped_allreduce,
                         grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_)
from ._alltoall import alltoall, alltoall_async
from ._broadcast import broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object
from ._handles import poll, synchronize
from ._ops import Adasum, Average, Max, Min, Product, Sum
from ._process_sets import global_process_set
from ._reducescatter import (grouped_reducescatter, grouped_reducescatter_async, reducescatter,
                             reducescatter_async)
from ._sparse import sparse_allreduce_async
from ._sync import barrier, join
from .compression import Compression, Compressor, FP16Compressor, NoneCompressor

# optimizer.py and backend.py reach these as collectives._NAME.
from ._allreduce import _allreduce_async  # noqa: F401
from ._broadcast import _broadcast_async  # noqa: F401
from ._check import _verify_ordered  # noqa: F401
from ._ops import _DTYPES, _check_op  # noqa: F401
from ._process_sets import _no_process_set  # noqa: F401

__all__ = ["Average", "Sum", "Min", "Max", "Adasum", "Product", "Compression", "Compressor", "NoneCompressor",
           "FP16Compressor", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "sparse_allreduce_async",
           "synchronize", "poll", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object",
           "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async", "allgather_object",
           "alltoall", "alltoall_async", "reducescatter", "reducescatter_async", "grouped_reducescatter",
           "grouped_reducescatter_async", "barrier", "join", "global_process_set"]
