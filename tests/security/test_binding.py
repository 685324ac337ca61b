"""Where the listeners bind: the address their peers dial, never every interface unless asked.

The real sockets of a spark_hvd.run job are checked in test_output_collector_listener.py; these are the rules
behind them, without a JVM."""

from __future__ import annotations

import io
import secrets
from typing import Any

from collective.bootstrap import RendezvousServer
from collective.launcher import LineSink
from spark_hvd.launch.driver import run_options
from spark_hvd.launch.task import barrier_task
from spark_hvd.launch.driver.output_collector import OutputCollector
from spark_hvd.launch.task_spec import TaskSpec


class _SparkWithConf:
    """Just enough of a SparkSession for the driver's address lookups."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.sparkContext = self
        self._conf = conf

    def getConf(self) -> Any:  # noqa: N802 - Spark's name
        return self._conf


def test_the_collector_binds_spark_s_driver_bind_address_else_the_driver_host() -> None:
    both = _SparkWithConf({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "10.9.8.7"})
    assert run_options._driver_bind_host(both) == "127.0.0.1"
    assert run_options._driver_host(both) == "10.9.8.7"  # the ranks still dial the advertised host
    assert run_options._driver_bind_host(_SparkWithConf({"spark.driver.host": "127.0.0.1"})) == "127.0.0.1"
    assert run_options._driver_bind_host(_SparkWithConf({"spark.driver.bindAddress": "0.0.0.0"})) == "0.0.0.0"  # asked


def test_the_listeners_default_to_loopback() -> None:
    with RendezvousServer() as server:
        assert server.address[0] == "127.0.0.1"
    sink = LineSink(io.StringIO())
    collector = OutputCollector(secrets.token_bytes(32), 1, lambda event: None, sink, sink)
    try:
        collector.start()
        assert collector.address[0] == "127.0.0.1"
    finally:
        collector.stop()


def test_the_task_side_rendezvous_binds_the_executor_s_own_host() -> None:
    spec = TaskSpec(num_proc=2, secret=secrets.token_bytes(32), collector_address="127.0.0.1:1", payload=b"")
    server, published = barrier_task._start_rendezvous(spec, "127.0.0.1:40000")
    try:
        assert server.address[0] == "127.0.0.1"
        assert published == f"127.0.0.1:{server.address[1]}"
    finally:
        server.stop()
