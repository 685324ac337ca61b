"""Rank: Horovod's build and availability queries (``mpi_built`` ... ``ddl_built``), answered for this install and
run.

Horovod answers most of them from its compile flags. Here MPI (mpi4py) and NCCL are found at run time, so
each answer says what this process can use now, and a script that gates on one takes the branch that works.
"""

from __future__ import annotations

import importlib.util

from collective.config import config_from_env
from collective.errors import CollectiveError
from collective.runtime import current, is_homogeneous, is_initialized


def mpi_built() -> bool:
    """True when the MPI backend can be used: mpi4py is installed (``COLLECTIVE_BACKEND=mpi`` under mpirun)."""
    return importlib.util.find_spec("mpi4py") is not None


def mpi_enabled() -> bool:
    """True when this job runs on the MPI backend (MPI moves the data); False before ``init()``, on the native
    ring, and under mpirun with the native ring moving the data (MPI then only introduced the ranks)."""
    return is_initialized() and current().config.backend == "mpi"


def gloo_built() -> bool:
    """True: the native TCP/shared-memory ring plays Gloo's role in Horovod (the controller and CPU data path
    that need no MPI), and it is always built."""
    return True


def gloo_enabled() -> bool:
    """True when this job runs on the native ring (Gloo's role; see ``gloo_built``), False before ``init()``
    and on the MPI backend."""
    return is_initialized() and current().config.backend != "mpi"


def nccl_built() -> int:
    """NCCL's version code (for example 22807 for 2.28.7) when libnccl loads in this process, else 0, as
    Horovod's. NCCL is loaded at run time (``Config.nccl_library``, the nvidia wheels, the system)."""
    from collective.nccl import load_library  # loads the extension's NCCL binding only when asked

    configured = current().config.nccl_library if is_initialized() else config_from_env().nccl_library
    try:
        return int(load_library(configured).version)
    except CollectiveError:  # not found, or not loadable: not available
        return 0


def cuda_built() -> bool:
    """True when CUDA tensors can be collected here: they go through NCCL, so when ``nccl_built()``."""
    return nccl_built() != 0


def rocm_built() -> bool:
    """False: there is no ROCm (RCCL) path."""
    return False


def ccl_built() -> bool:
    """False: there is no oneCCL path."""
    return False


def mpi_threads_supported() -> bool:
    """Whether MPI runs with multi-threading support (``MPI_THREAD_MULTIPLE``), as Horovod's. Needs
    ``init()``; False on the native ring, where no MPI moves the data."""
    if not is_initialized():
        raise ValueError("mpi_threads_supported() needs init() first")
    if not mpi_enabled():
        return False
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def ddl_built() -> bool:
    """False: there is no IBM DDL path."""
    return False


def sycl_built() -> bool:
    """False: there is no SYCL (Intel GPU) path."""
    return False


__all__ = ["ccl_built", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled",
           "mpi_threads_supported", "nccl_built", "rocm_built", "sycl_built",
           "is_homogeneous"]  # a topology query, exported with these as Horovod's packages export it
