"""Rank: what Horovod's framework APIs (``horovod.torch``, ``horovod.tensorflow``) export alike beyond names.py:
the elastic interrupt and Horovod's name for the collective's error. Each framework's ``mpi_ops`` adds its ops."""

from collective.api.names import *  # noqa: F401,F403  (errors, reduce ops, process sets, topology, build queries)
from collective.api.names import __all__ as _shared_names
from collective.elastic.errors import HostsUpdatedInterrupt
from collective.errors import CollectiveError

# Scripts that catch Horovod's error type keep working.
HorovodInternalError = CollectiveError

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", *_shared_names]
