"""Horovod's sparse allreduce: a COO tensor's indices and values, allgathered from every
rank (DistributedOptimizer's sparse gradients take this path)."""

import torch

from . import runtime
from ._allgather import allgather
from ._handles import _CallableHandle, _done
from ._ops import Average, Sum, _check_op
from ._process_sets import _no_process_set


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Horovod's allreduce of a sparse COO tensor: every rank's indices and values are
    gathered (duplicates are summed when the result is coalesced); Average divides the
    values by size(). synchronize(handle) returns the sparse result."""
    _no_process_set(process_set)
    op = _check_op(op)
    if op not in (Sum, Average):
        raise ValueError(f"sparse_allreduce_async: op {op!r} is not Sum or Average")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather(t.indices().t().contiguous(), name=f"{name}.indices")
    values = allgather(t.values(), name=f"{name}.values")
    if op is Average:
        values = values / runtime.size()
    return _CallableHandle(_done(torch.sparse_coo_tensor(indices.t(), values, t.size())))
