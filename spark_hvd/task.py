"""Rank child: ``get_available_devices()``, Horovod's ``horovod.spark.task`` call for a function run by
``spark_hvd.run``: which GPUs Spark gave this rank's task."""

from __future__ import annotations

from spark_hvd.launch.rank.rank_context import rank_context


def get_available_devices() -> list[str]:
    """The GPUs Spark assigned to this rank's task, as this process addresses them: ``["0"]`` for one GPU, ``[]``
    for none.

    Horovod's rank saw every GPU of the machine, so it returned Spark's addresses and scripts pick their device
    with them (``torch.cuda.set_device(int(get_available_devices()[0]))``). Here the launcher sets the rank's
    ``CUDA_VISIBLE_DEVICES`` to exactly its task's GPUs, in Spark's order, so the same scripts need the positions in
    that list; Spark's own addresses are ``spark_hvd.rank_context().gpu_addresses``.
    """
    return [str(index) for index in range(len(rank_context().gpu_addresses))]
