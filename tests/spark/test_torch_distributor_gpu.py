"""spark_hvd.TorchDistributor's GPU mapping on a standalone cluster whose workers advertise one
fake GPU each (no CUDA here: only the environment the ranks get is checked)."""

from __future__ import annotations

import io
from typing import Iterator

import cloudpickle
import pytest

import spark_hvd
import torch_training
from torch_training import visible_devices

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


@pytest.fixture(scope="module", autouse=True)
def ship_functions() -> Iterator[None]:
    cloudpickle.register_pickle_by_value(torch_training)
    yield
    cloudpickle.unregister_pickle_by_value(torch_training)


def test_use_gpu_gives_each_rank_its_tasks_gpu_as_device_0(gpu_spark) -> None:
    views = spark_hvd.run(spark_hvd.torch_distributor.RankZeroResult(visible_devices), num_proc=2,
                          spark=gpu_spark, torch_distributed=True, stderr=io.StringIO())
    assert views[1] is None   # only rank 0's value travels back, as TorchDistributor returns it
    view = spark_hvd.TorchDistributor(2, local_mode=False, use_gpu=True, stderr=io.StringIO()).run(
        visible_devices)
    # Rank 0's task runs on either worker (device 0, or 6 behind that worker's restriction);
    # LOCAL_RANK indexes the task's own GPUs.
    assert view.pop("CUDA_VISIBLE_DEVICES") in ("0", "6")
    assert view == {"RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def test_both_ranks_see_their_own_mapped_gpu(gpu_spark) -> None:
    views = spark_hvd.run(visible_devices, num_proc=2, spark=gpu_spark, torch_distributed=True,
                          stderr=io.StringIO())
    # Worker 1's executors are restricted to CUDA_VISIBLE_DEVICES=4,6: Spark's "1" is device 6.
    assert sorted(v["CUDA_VISIBLE_DEVICES"] for v in views) == ["0", "6"]
    assert {v["LOCAL_RANK"] for v in views} == {"0"}


def test_without_use_gpu_the_ranks_see_no_gpu(gpu_spark) -> None:
    view = spark_hvd.TorchDistributor(2, local_mode=False, use_gpu=False, stderr=io.StringIO()).run(
        visible_devices)
    assert view["CUDA_VISIBLE_DEVICES"] == ""


def test_local_mode_wants_gpus_on_the_driver_as_pyspark_does(gpu_spark) -> None:
    # The executors have GPUs; the driver has none.
    with pytest.raises(RuntimeError, match="GPUs were unable to be found on the driver"):
        spark_hvd.TorchDistributor(2, local_mode=True, use_gpu=True)
