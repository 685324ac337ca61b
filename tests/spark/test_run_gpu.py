"""GPU assignment on a standalone cluster whose workers advertise one fake GPU each."""

from __future__ import annotations

import pytest

import spark_hvd
from rank_functions import available_devices, gpu_view

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_each_rank_sees_its_own_gpu_through_cuda_visible_devices(gpu_spark) -> None:
    views = spark_hvd.run(gpu_view, num_proc=2, spark=gpu_spark)
    assert [v["rank"] for v in views] == [0, 1]
    seen = sorted((tuple(v["gpu_addresses"]), v["cuda_visible_devices"]) for v in views)
    # Worker 0 has GPU "0" and no restriction; worker 1's executors are restricted to
    # CUDA_VISIBLE_DEVICES=4,6, so its Spark address "1" is physical device 6.
    assert seen == [(("0",), "0"), (("1",), "6")]


def test_get_available_devices_names_the_tasks_gpu_as_the_rank_addresses_it(gpu_spark) -> None:
    """Horovod's horovod.spark.task.get_available_devices(): each rank gets its task's one GPU, as device "0" of its
    CUDA_VISIBLE_DEVICES, whichever Spark address and physical device it is."""
    views = spark_hvd.run(available_devices, num_proc=2, spark=gpu_spark)
    assert [v["devices"] for v in views] == [["0"], ["0"]]
    assert sorted((tuple(v["gpu_addresses"]), v["cuda_visible_devices"]) for v in views) == [(("0",), "0"),
                                                                                               (("1",), "6")]
