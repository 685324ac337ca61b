"""spark_hvd.task, Horovod's horovod.spark.task, inside functions run by spark_hvd.run on local[2]."""

from __future__ import annotations

import pytest

import spark_hvd
from rank_functions import available_devices

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def test_get_available_devices_is_empty_where_spark_gives_no_gpus(local_spark) -> None:
    views = spark_hvd.run(available_devices, num_proc=2, spark=local_spark)
    assert [v["devices"] for v in views] == [[], []]


def test_get_available_devices_outside_a_run_says_where_it_works() -> None:
    from spark_hvd.task import get_available_devices

    with pytest.raises(RuntimeError, match="only available inside fn run by spark_hvd.run"):
        get_available_devices()
