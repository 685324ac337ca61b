"""prestart_ranks: while an estimator writes its data, a warm-up stage starts the ranks' zygotes in the Spark
workers, so the first fit in a worker forks its ranks from a zygote instead of starting them cold.

Each test gives its fits a backend_env of their own: a zygote is keyed on the run's env, so none that an earlier
test (or fit) left in the workers can serve them, as in a fresh session's workers.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import torch

import rank_functions
from by_value import pickled_by_value
from estimator_data import blobs
from estimator_models import RecordProcess, class_loss, classifier

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

WARM_UP_LOGGER = "spark_hvd.launch.driver.zygote_warm_up"


def _fit(spark, store, tmp_path, name: str, **overrides):
    """A two-rank fit whose ranks record which process started them; returns the model and the records."""
    from spark_hvd import TorchEstimator

    records = tmp_path / name
    records.mkdir()
    model = classifier(4, 3)
    estimator = TorchEstimator(
        num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02), loss=class_loss,
        feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=2, store=store, verbose=0,
        random_seed=3, transformation_fn=RecordProcess(str(records)),
        backend_env={"SPARK_HVD_TEST_FRESH_WORKERS": uuid.uuid4().hex}, **overrides)
    fitted = estimator.fit(blobs(spark, 256))
    ranks = [json.loads((records / f"rank{rank}.json").read_text()) for rank in range(2)]
    return fitted, ranks


def test_the_first_fit_forks_its_ranks_from_zygotes_the_warm_up_started(local_spark, store, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=WARM_UP_LOGGER)
    _, ranks = _fit(local_spark, store, tmp_path, "warm")
    assert [r["started_by"] for r in ranks] == ["zygote", "zygote"], ranks
    # ... the very zygotes the warm-up stage reported starting, one per worker.
    kept = [record.args[0] for record in caplog.records if "keep zygotes" in record.msg]
    assert len(kept) == 1, caplog.text
    assert {r["parent"] for r in ranks} == set(kept[0]), caplog.text


def test_a_fit_without_the_warm_up_starts_its_ranks_itself_and_trains_the_same_model(local_spark, store,
                                                                                      tmp_path) -> None:
    warm, warm_ranks = _fit(local_spark, store, tmp_path, "warm")
    cold, cold_ranks = _fit(local_spark, store, tmp_path, "cold", prestart_ranks=False)
    assert [r["started_by"] for r in warm_ranks] == ["zygote", "zygote"], warm_ranks
    assert [r["started_by"] for r in cold_ranks] == ["task", "task"], cold_ranks
    warm_weights, cold_weights = warm.getModel().state_dict(), cold.getModel().state_dict()
    assert list(warm_weights) == list(cold_weights)
    for name, tensor in warm_weights.items():
        assert torch.equal(tensor, cold_weights[name]), name
    assert warm.getHistory() == cold.getHistory()


def test_a_failing_warm_up_is_logged_and_the_fit_starts_its_ranks_itself(local_spark, store, tmp_path, caplog,
                                                                         monkeypatch) -> None:
    from pyspark import cloudpickle as spark_cloudpickle

    from spark_hvd.launch.driver import zygote_warm_up

    # The warm-up's tasks call this instead of starting a zygote (Spark pickles them with its own cloudpickle).
    monkeypatch.setattr(zygote_warm_up, "prestart_zygote", rank_functions.failing_prestart)
    caplog.set_level(logging.DEBUG, logger=WARM_UP_LOGGER)
    with pickled_by_value(rank_functions, pickler=spark_cloudpickle):
        fitted, ranks = _fit(local_spark, store, tmp_path, "failed")
    assert [r["started_by"] for r in ranks] == ["task", "task"], ranks
    assert "injected failure of the warm-up task" in caplog.text, caplog.text
    assert len(fitted.getHistory()) == 2


def test_an_elastic_fit_forks_its_first_formation_from_the_warm_up_zygotes(local_spark, store, tmp_path) -> None:
    """run_elastic's tasks key their zygote as spark_hvd.run's do, so the warm-up serves its first stage too."""
    fitted, ranks = _fit(local_spark, store, tmp_path, "elastic", elastic=True)
    assert [r["started_by"] for r in ranks] == ["zygote", "zygote"], ranks
    assert len(fitted.getHistory()) == 2


def test_no_warm_up_where_it_cannot_serve_the_run(local_spark, caplog, monkeypatch) -> None:
    """Without modules, with more ranks than slots, with GPUs per task or under Spark Connect, nothing is
    submitted and the reason is logged."""
    from spark_hvd.launch.driver import zygote_warm_up
    from spark_hvd.launch.driver.launch_checks import ClusterShape

    caplog.set_level(logging.DEBUG, logger=WARM_UP_LOGGER)
    jobs_before = local_spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    assert zygote_warm_up.start_warm_up(local_spark, 2, {}, None, ()) is None
    assert zygote_warm_up.start_warm_up(local_spark, 3, {}, None, ("wave",)) is None

    class ConnectSession:   # what spark_hvd tells a Spark Connect session by
        __module__ = "pyspark.sql.connect.session"

    assert zygote_warm_up.start_warm_up(ConnectSession(), 2, {}, None, ("wave",)) is None
    monkeypatch.setattr(zygote_warm_up, "describe_cluster",
                        lambda spark: ClusterShape(master="local[2]", slots=2, task_gpus="1"))
    assert zygote_warm_up.start_warm_up(local_spark, 2, {}, None, ("wave",)) is None
    assert local_spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs_before
    reasons = [record.getMessage() for record in caplog.records]
    assert reasons == ["spark_hvd warm-up skipped: no keep_warm modules",
                       "spark_hvd warm-up skipped: 3 rank(s) need 3 task slots at once, the cluster has 2",
                       "spark_hvd warm-up skipped: a Spark Connect session",
                       "spark_hvd warm-up skipped: tasks get GPUs (spark.task.resource.gpu.amount=1)"], reasons
