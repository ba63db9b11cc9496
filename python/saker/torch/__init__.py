"""Horovod's PyTorch API over Saker's collective library.

    import saker.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Horovod's elastic API is hvd.elastic (run, TorchState, ElasticSampler): commits persist,
so that saker-run's restarts, at a new world size after a resize, resume from them.

Importing this package also registers the ``saker`` backend of torch.distributed
(``torch.distributed.init_process_group("saker")``). See saker-torch(7).
"""

from .runtime import (init, shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
                      cross_size, is_homogeneous, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
                      gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built, HorovodInternalError,
                      HostsUpdatedInterrupt)
from .collectives import (Average, Sum, Min, Max, Adasum, Product, Compression, allreduce, allreduce_,
                          allreduce_async, allreduce_async_, grouped_allreduce, grouped_allreduce_,
                          grouped_allreduce_async, grouped_allreduce_async_, sparse_allreduce_async, synchronize,
                          poll, broadcast, broadcast_, broadcast_async, broadcast_async_, allgather, allgather_async,
                          grouped_allgather, grouped_allgather_async, alltoall, alltoall_async, reducescatter,
                          reducescatter_async, grouped_reducescatter, grouped_reducescatter_async, broadcast_object,
                          allgather_object, barrier, join, global_process_set)
from .optimizer import DistributedOptimizer, broadcast_parameters, broadcast_optimizer_state
from .sync_batch_norm import SyncBatchNorm
from . import backend, checkpoint, elastic

backend.register()

