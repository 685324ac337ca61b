"""``horovod.tensorflow.mpi_ops``, the module of Horovod's ops that some scripts and tests import names from
(``from horovod.tensorflow.mpi_ops import Sum``, ``hvd.mpi_ops._basics``): the package's names, and ``_basics``."""

from collective.process_sets import HorovodBasics
from collective.tensorflow import *  # noqa: F401,F403  (the package's __all__: its ops, queries and process sets)

_basics = HorovodBasics()
