"""Horovod's TensorFlow 2 API on the collective engine: port a script with

    import collective.tensorflow as hvd   # was: import horovod.tensorflow as hvd

and run it with ``python -m collective.run -np 2 train.py``. Ops work eagerly and inside
``tf.function``.

The bridge. Tensors reach the engine as numpy arrays viewed through DLPack (no copy either way):
directly when eager, and inside ``tf.function`` from a ``tf.py_function`` op, which TensorFlow runs
in traced order (see ``collective.tensorflow.graph.bridge``). It needs no TensorFlow headers and no custom
kernels, so one build serves every TensorFlow version. Its cost: the one copy an out-of-place
allreduce or broadcast needs anyway, plus some tens of microseconds of Python per call
(bench/RESULTS.md has the figures against collective.torch). Gradient reduction sends a step's
gradients in a few buckets that overlap backward (``collective.tensorflow.graph.overlap``), so that cost is
paid a few times a step, not once per gradient. CPU only; not inside XLA.
"""

from collective.tensorflow.mpi_ops import *  # noqa: F401,F403
from collective.tensorflow.mpi_ops import __all__  # noqa: F401
from collective.tensorflow import util  # noqa: F401  (hvd.util, as Horovod's package has it)
from collective.tensorflow.util import _executing_eagerly  # noqa: F401  (Horovod exposes it on the package)
from collective.tensorflow import elastic  # noqa: F401  (hvd.elastic, which builds on the names above)
from collective.tensorflow import mpi_ops  # noqa: F401  (hvd.mpi_ops, where the names above are gathered)
