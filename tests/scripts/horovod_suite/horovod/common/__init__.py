"""horovod.common: the names scripts import from it (its exceptions), from saker.torch."""
