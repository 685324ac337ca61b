"""The MPI backend: CPU collectives through mpi4py (``collective.init(backend="mpi")`` under mpirun).

``MpiCommunicator`` has the native communicator's methods, so ``collective``'s numpy API runs on it
unchanged; ``MpiEngine`` has ``collective.engine.Engine``'s, so ``collective.torch`` does too.
"""

from collective.mpi.communicator import MpiCommunicator
from collective.mpi.engine import MpiEngine

__all__ = ["MpiCommunicator", "MpiEngine"]
