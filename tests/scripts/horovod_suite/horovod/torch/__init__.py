"""horovod.torch is saker.torch: the same module object, so that every name a Horovod
script reaches (hvd.allreduce, hvd.DistributedOptimizer, hvd.HorovodInternalError...) is
Saker's, and a name Saker lacks fails as AttributeError instead of being faked here."""

import sys

import saker.torch

sys.modules[__name__] = saker.torch
