"""Horovod's exception types are saker.torch's (one class each, so that an except clause
written for either catches what the other raises)."""

from saker.torch import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
