"""A hostile peer against the driver's output collector while a real spark_hvd.run job on local[2] streams through it,
and where the collector and the task-side rendezvous listen (the driver's and the executor's address, never all)."""

from __future__ import annotations

import importlib.util
import io
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("pyspark")

import cloudpickle  # noqa: E402

import listener_ranks  # noqa: E402
import spark_hvd  # noqa: E402
from spark_hvd.launch.driver import runner  # noqa: E402
from spark_hvd.launch.driver.output_collector import OutputCollector  # noqa: E402
from watched_process import Attacker, assert_all_refused  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

LOOPBACK = "127.0.0.1"


def _spark_test_helpers() -> Any:
    """tests/spark/conftest.py as a module: its session builder, so this session is built as theirs are."""
    path = Path(__file__).resolve().parents[1] / "spark" / "conftest.py"
    sys.path.insert(0, str(path.parent))  # its own imports (rank_functions...), as pytest gives tests/spark
    spec = importlib.util.spec_from_file_location("spark_test_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """local[2] with the driver's host and bind address set to loopback, in the environment tests/spark gives Spark."""
    helpers = _spark_test_helpers()
    env = {"JAVA_HOME": helpers._java_home(), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": LOOPBACK}
    cloudpickle.register_pickle_by_value(listener_ranks)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            conf = {"spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK}
            with helpers._session("local[2]", conf) as session:
                yield session
    finally:
        cloudpickle.unregister_pickle_by_value(listener_ranks)


class _Job:
    """One spark_hvd.run of the listener-probing rank function, with the collector it used recorded (and, when
    attacked, the attack started inside the collector's start(), before any task can connect)."""

    def __init__(self, spark: Any, attack: bool) -> None:
        self.collector_port = 0
        self.attack_setup_s = 0.0
        self.attacker: Attacker | None = None
        job = self

        class RecordedCollector(OutputCollector):
            def __init__(self, secret: bytes, *args: Any, **kwargs: Any) -> None:
                super().__init__(secret, *args, **kwargs)
                self.job_secret = secret

            def start(self) -> int:
                port = super().start()
                job.collector_port = port
                if attack:
                    began = time.monotonic()
                    job.attacker = Attacker("collector", f"{LOOPBACK}:{port}", self.job_secret)
                    job.attack_setup_s = time.monotonic() - began
                return port

        out = io.StringIO()
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(runner, "OutputCollector", RecordedCollector)
                began = time.monotonic()
                self.results = spark_hvd.run(listener_ranks.meet_and_look_at_the_listeners, num_proc=2,
                                             spark=spark, stdout=out, stderr=out)
                # The attacker's own start-up (a process, a thousand connections) is not the job's time.
                self.elapsed_s = time.monotonic() - began - self.attack_setup_s
            self.summary = self.attacker.finish() if self.attacker is not None else None
        finally:
            if self.attacker is not None:
                self.attacker.kill()
        assert [r["sum"] for r in self.results] == [[1.0] * 4] * 2, out.getvalue()

    def bound_addresses(self, port: int) -> set[str]:
        return {address for address, bound_port in self.results[0]["listening"] if bound_port == port}


@pytest.fixture(scope="module")
def plain_job(spark: Any) -> _Job:
    """The unattacked job, timed on a warm session: a session's first job pays for its Python workers (several
    times a warm job's time), which would hide any delay an attack adds."""
    _Job(spark, attack=False)
    return _Job(spark, attack=False)


def test_the_collector_and_the_task_rendezvous_listen_on_the_address_ranks_dial(spark: Any, plain_job: _Job) -> None:
    conf = spark.sparkContext.getConf()
    assert (conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress")) == (LOOPBACK, LOOPBACK)
    assert plain_job.bound_addresses(plain_job.collector_port) == {LOOPBACK}
    rendezvous_host, rendezvous_port = plain_job.results[0]["rendezvous"].rsplit(":", 1)
    assert rendezvous_host == LOOPBACK
    assert plain_job.bound_addresses(int(rendezvous_port)) == {LOOPBACK}


def test_a_spark_job_streams_finishes_and_returns_on_time_under_attack(spark: Any, plain_job: _Job) -> None:
    attacked = _Job(spark, attack=True)
    assert attacked.summary is not None
    plain_s, attacked_s = plain_job.elapsed_s, attacked.elapsed_s
    print(f"collector: unattacked {plain_s:.2f}s, attacked {attacked_s:.2f}s "
          f"(ratio {attacked_s / plain_s:.2f}); attack: {attacked.summary}")
    assert attacked_s < 3 * plain_s + 5, (plain_s, attacked_s, attacked.summary)
    assert_all_refused(attacked.summary, idle=1200)
