"""Horovod's process sets: saker.torch has only the global one (a group of ranks of its own
runs as its own job step)."""

from . import runtime


def _no_process_set(process_set):
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError("saker.torch: process sets are not supported; run each group of ranks as its "
                                  "own job step")


class _GlobalProcessSet:
    """Horovod's global_process_set: every rank (the only set Saker supports)."""

    def size(self):
        return runtime.size()

    def rank(self):
        return runtime.rank()

    def included(self):
        return True


global_process_set = _GlobalProcessSet()
