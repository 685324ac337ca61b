"""BroadcastGlobalVariablesHook: the TF1 ``MonitoredTrainingSession`` way to start every rank from the
root rank's variables, as Horovod's hook of that name."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from collective.process_sets import rank_number
from collective.tensorflow.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts all global variables from ``root_rank`` once the session is created (after its
    initialisation or checkpoint restore), so training starts from the same weights everywhere.
    ``device`` is accepted for Horovod compatibility; collectives run on CPU tensors."""

    def __init__(self, root_rank: int, device: str = "") -> None:
        super().__init__()
        self.root_rank = rank_number(root_rank, "root_rank")
        self.device = device
        self.bcast_op: tf.Operation | None = None

    def begin(self) -> None:
        # A hook may serve several sessions, each over a graph of its own: build the op in the current one.
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self.bcast_op)
