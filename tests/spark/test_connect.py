"""spark_hvd under Spark Connect: against SparkSession.builder.remote("local[2]") and against a Connect server
started on its own. The client never listens for the ranks (OutputCollector.start fails the test if called):
results, output, events and the failing rank's traceback arrive through the barrier stage's rows."""

from __future__ import annotations

import contextlib
import io
import os
import time
from typing import Any, Iterator

import numpy as np
import pytest

import kept_session
from spark_conf import COMMON_CONF
from connect_server import ConnectServer
from estimator_data import blobs, predictions, with_ids
from rank_functions import chatty, emit_numbered_events, raise_on_rank

pytest.importorskip("grpc", reason="Spark Connect needs the [connect] extra (grpcio and friends)")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", params=["remote-local", "connect-server"])
def connect_spark(request: pytest.FixtureRequest, spark_environment: dict[str, str],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect session: remote("local[2]") (its server runs in this process's JVM), or a client of
    a SparkConnectServer on local[2] that this fixture starts and stops."""
    from pyspark.sql import SparkSession

    with _connect_environ_restored():
        if request.param == "remote-local":
            kept_session.release()   # remote("local[2]") starts a SparkContext in this process's JVM
            # It builds that context from the JVM's system properties, which an earlier session of this
            # process has cleared (tests/spark/conftest.py), so the application name must come from here.
            conf = {**COMMON_CONF, "spark.app.name": "spark_hvd-tests-connect"}
            try:
                with SparkSession.builder.remote("local[2]").config(map=conf).getOrCreate() as spark:
                    yield spark
            finally:
                _stop_the_local_context()
            return
        with ConnectServer(tmp_path_factory.mktemp("connect"), os.environ, conf=COMMON_CONF) as server:
            with SparkSession.builder.remote(server.url).getOrCreate() as spark:
                yield spark


def _stop_the_local_context() -> None:
    """remote("local[2]") leaves its classic SparkContext running in this process; the next module's
    getOrCreate() would be handed that one (with the Connect plugin) instead of its own."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


# pyspark leaves these behind; a token left by remote("local[2]") makes the next client speak TLS to a
# server that does not.
_CONNECT_VARIABLES = ("SPARK_CONNECT_AUTHENTICATE_TOKEN", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE",
                      "SPARK_REMOTE")


@contextlib.contextmanager
def _connect_environ_restored() -> Iterator[None]:
    before = {name: os.environ.get(name) for name in _CONNECT_VARIABLES}
    for name in _CONNECT_VARIABLES:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def client_never_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Executors may have no route to a Connect client: the ranks' output collector must never start."""
    from spark_hvd.launch.driver.output_collector import OutputCollector

    def refuse(self: Any) -> int:
        raise AssertionError("under Spark Connect the client must not listen for the ranks")

    monkeypatch.setattr(OutputCollector, "start", refuse)


def test_the_session_is_a_connect_one(connect_spark: Any) -> None:
    from spark_hvd.launch.driver.connect_session import is_connect_session

    assert is_connect_session(connect_spark)
    with pytest.raises(Exception, match="sparkContext"):
        connect_spark.sparkContext  # noqa: B018 - what the classic code paths used to touch


def test_run_returns_results_output_and_events_through_the_stage(connect_spark: Any,
                                                                client_never_listens: None) -> None:
    import spark_hvd

    out, err = io.StringIO(), io.StringIO()
    assert spark_hvd.run(chatty, args=(3,), num_proc=2, spark=connect_spark, stdout=out, stderr=err) == [0, 1]
    for rank in (0, 1):
        assert [line for line in out.getvalue().splitlines() if line.startswith(f"[{rank}]<stdout>:")] == [
            f"[{rank}]<stdout>:rank {rank} line {i}" for i in range(3)]
        assert f"[{rank}]<stderr>:rank {rank} to stderr" in err.getvalue()

    events: list[tuple[int, dict]] = []
    # No spark=: the active session is the Connect one.
    assert spark_hvd.run(emit_numbered_events, args=(4,), num_proc=2,
                         on_event=lambda rank, data: events.append((rank, data)), verbose=0) == [4, 4]
    for rank in (0, 1):
        assert [data["i"] for r, data in events if r == rank] == [0, 1, 2, 3]   # in the order sent


def test_a_failing_rank_is_named_with_its_traceback_and_last_lines(connect_spark: Any,
                                                                   client_never_listens: None) -> None:
    import spark_hvd

    began = time.monotonic()
    with pytest.raises(spark_hvd.RunError) as caught:
        spark_hvd.run(raise_on_rank, args=(1,), num_proc=2, spark=connect_spark,
                      stdout=io.StringIO(), stderr=io.StringIO())
    # Nothing cancels a Connect stage: the healthy rank must see rank 1 leave, not wait out its timeout.
    assert time.monotonic() - began < 120, "the healthy rank sat out the collective timeout"
    assert caught.value.rank == 1
    assert "ValueError: boom from rank 1" in caught.value.failure.summary
    assert 'raise ValueError(f"boom from rank {bad_rank}")' in caught.value.failure.traceback
    assert caught.value.last_lines == ["about to raise"]


def test_num_proc_above_the_slots_fails_at_once(connect_spark: Any) -> None:
    import spark_hvd
    from spark_hvd.launch.driver.launch_checks import describe_cluster

    shape = describe_cluster(connect_spark)
    assert (shape.master, shape.slots) == ("local[2]", 2)
    began = time.monotonic()
    with pytest.raises(spark_hvd.NotEnoughSlotsError, match=r"num_proc=3 .* the cluster has 2") as caught:
        spark_hvd.run(chatty, args=(1,), num_proc=3, spark=connect_spark)
    assert (caught.value.num_proc, caught.value.slots) == (3, 2)
    # Before any barrier stage: Spark's own check would have retried for about ten minutes.
    assert time.monotonic() - began < 120, "the shortage was not found before launching"


def test_fit_without_a_store_then_transform_save_and_load(connect_spark: Any, tmp_path: Any,
                                                         client_never_listens: None) -> None:
    import torch

    from estimator_models import accuracy, class_loss, classifier
    from spark_hvd import TorchEstimator, TorchModel

    model = classifier(4, 3)
    estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                               loss=class_loss, metrics=[accuracy], feature_cols=["features"],
                               label_cols=["label"], batch_size=32, epochs=3, verbose=0)
    fitted = estimator.fit(blobs(connect_spark, 400))   # no store=: a temporary one on a local master
    assert estimator.getStore() is not None
    metrics = fitted.getEpochMetrics()
    assert [m["epoch"] for m in metrics] == [0, 1, 2] and metrics[-1]["loss"] < metrics[0]["loss"]

    test = with_ids(blobs(connect_spark, 120, seed=0, partitions=3))
    logits = predictions(fitted.transform(test))
    labels = np.array([r.label for r in test.orderBy("id").collect()])
    assert logits.shape == (120, 3) and (logits.argmax(axis=1) == labels).mean() > 0.9

    path = str(tmp_path / "saved")
    fitted.save(path)
    loaded = TorchModel.load(path)
    assert loaded.getEpochMetrics() == metrics
    np.testing.assert_array_equal(predictions(loaded.transform(test)), logits)


def test_a_failing_fit_names_the_rank(connect_spark: Any, tmp_path: Any, client_never_listens: None) -> None:
    import torch

    from estimator_models import FailOnce, class_loss, classifier
    from spark_hvd import Store, TorchEstimator
    from spark_hvd.errors import RunError

    model = classifier(4, 3)
    # 200 rows / (2 ranks * 32) = 4 steps an epoch: rank 1 fails in its second epoch.
    failing = FailOnce(str(tmp_path / "failed-once"), rank=1, after_calls=5 * 32)
    estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                               loss=class_loss, feature_cols=["features"], label_cols=["label"], batch_size=32,
                               epochs=3, verbose=0, store=Store.create(str(tmp_path / "store")),
                               transformation_fn=failing)
    with pytest.raises(RunError, match="injected failure on rank 1") as caught:
        estimator.fit(blobs(connect_spark, 256))
    assert caught.value.rank == 1 and "in __call__" in caught.value.failure.traceback
