"""Horovod's PyTorch API on the collective engine: port a script with

    import collective.torch as hvd   # was: import horovod.torch as hvd

and run it with ``python -m collective.run -np 2 train.py`` (or under mpirun). CPU tensors go through the
background engine; CUDA tensors through NCCL (collective/torch/routes/cuda_ops.py).
"""

from collective.torch.mpi_ops import *  # noqa: F401,F403
from collective.torch.mpi_ops import __all__  # noqa: F401
from collective.torch import elastic  # noqa: F401  (hvd.elastic, which builds on the names above)
from collective.torch import mpi_ops  # noqa: F401  (hvd.mpi_ops, where the names above are gathered)
