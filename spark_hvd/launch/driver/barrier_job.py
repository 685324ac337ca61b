"""Driver: runs the barrier stage from a driver thread, so the caller can watch ranks and cancel it."""

from __future__ import annotations

import queue
import threading
import uuid
from dataclasses import dataclass, replace
from typing import Any, Union

from collective.config import parse_host_port
from spark_hvd.launch.task.barrier_task import RESULT_DDL, BarrierTask
from spark_hvd.launch.driver.connect_session import StageStartWatch, is_connect_session
from spark_hvd.launch.driver_rendezvous import start_driver_rendezvous
from spark_hvd.launch.driver.output_collector import RankConnected
from spark_hvd.launch.task_spec import TaskSpec


@dataclass(frozen=True)
class JobFinished:
    results: dict[int, bytes]   # rank -> cloudpickled return value


@dataclass(frozen=True)
class JobFailed:
    error: BaseException


@dataclass(frozen=True)
class StageRows:
    """The stage succeeded and its rows carry the ranks' output, events and failure reports (StageOutbox
    bytes per rank): the driver replays them into its collector before it reads ``results``."""
    results: dict[int, bytes]   # only the ranks that returned a value
    outboxes: dict[int, bytes]


JobEvent = Union[JobFinished, JobFailed, StageRows]


class BarrierJob:
    """One Spark job: a stage of ``num_proc`` barrier tasks over a one-row-per-partition range."""

    def __init__(self, spark: Any, spec: TaskSpec, events: "queue.SimpleQueue[Any]",
                 rendezvous_bind_host: str | None = None) -> None:
        """``rendezvous_bind_host``: where the run's rendezvous store listens (driver_rendezvous.py), when the
        tasks can dial the driver; default, the host they dial (the collector's)."""
        self._spark = spark
        self._spec = spec
        self._rendezvous_bind_host = rendezvous_bind_host
        self._events = events
        self.group_id = f"spark_hvd.run-{uuid.uuid4().hex}"
        self._thread = threading.Thread(target=self._run, name="spark-hvd-job", daemon=True)
        # The run's rendezvous store, while it serves; once the stage is given up, none is served again.
        self._rendezvous_lock = threading.Lock()
        self._rendezvous: Any = None
        self._given_up = False

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Cancels the stage; Spark then kills the tasks' Python workers, and their children die too.

        First the stage is fenced: the rendezvous store it meets at ends every wait, so a rank that starts late
        (after a start timeout) can no longer form a job with its peers and run fn while the driver moves on."""
        with self._rendezvous_lock:
            self._given_up = True
            if self._rendezvous is not None:
                self._rendezvous.fence()
        self._cancel_spark_job()

    def _cancel_spark_job(self) -> None:
        try:
            self._spark.sparkContext.cancelJobGroup(self.group_id)
        except Exception:  # noqa: BLE001 - Spark Connect: cancel by tag instead
            self._spark.interruptTag(self.group_id)

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._tag_jobs_of_this_thread()
            spec = self._spec
            # With nics the store must listen on those interfaces, which the driver's host may lack: rank 0
            # serves it there, as before.
            if spec.collector_address is not None and not spec.nics:
                spec = replace(spec, rendezvous_address=self._serve_rendezvous(spec))
            n = spec.num_proc
            frame = self._spark.range(0, n, 1, n).mapInArrow(BarrierTask(spec), RESULT_DDL, barrier=True)
            if is_connect_session(self._spark):
                # No connection tells the driver a rank started: Connect's progress reports do.
                def started() -> None:
                    for rank in range(n):
                        self._events.put(RankConnected(rank))
                with StageStartWatch(self._spark, n, started):
                    rows = frame.collect()
            else:
                rows = frame.collect()
            results = {int(row["rank"]): bytes(row["result"]) for row in rows if row["result"] is not None}
            outboxes = {int(row["rank"]): bytes(row["outbox"]) for row in rows if row["outbox"] is not None}
            self._events.put(StageRows(results, outboxes) if outboxes else JobFinished(results))
        except BaseException as e:  # noqa: BLE001 - every ending must reach the waiting caller
            self._events.put(JobFailed(e))
        finally:
            with self._rendezvous_lock:
                server, self._rendezvous = self._rendezvous, None
            if server is not None:
                server.stop()

    def _serve_rendezvous(self, spec: TaskSpec) -> str:
        advertised = parse_host_port(spec.collector_address or "")[0]
        server, address = start_driver_rendezvous(self._rendezvous_bind_host or advertised, advertised,
                                                  spec.secret, spec.handshake_timeout_s)
        with self._rendezvous_lock:
            self._rendezvous = server
            if self._given_up:
                server.fence()
        return address

    def _tag_jobs_of_this_thread(self) -> None:
        # Job groups are per thread (PySpark pins Python threads to JVM threads), so this does not
        # touch the caller's own group. Interrupting makes Spark kill the tasks' Python workers.
        try:
            sc = self._spark.sparkContext
        except Exception:  # noqa: BLE001 - Spark Connect
            self._spark.addTag(self.group_id)
            return
        sc.setJobGroup(self.group_id, f"spark_hvd.run: {self._spec.num_proc} ranks", interruptOnCancel=True)
