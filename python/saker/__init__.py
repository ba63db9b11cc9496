"""Saker for Python.

``saker.torch`` gives PyTorch scripts Horovod's API (``import saker.torch as hvd``) and a
``saker`` backend for ``torch.distributed``, both over Saker's collective library
(libsaker_comm: rendezvous from Slurm, ring/shm allreduce with tensor fusion, timeline,
stall reports). See saker-torch(7).
"""

__version__ = "0.1"
