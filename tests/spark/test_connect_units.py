"""Without Spark: the StageOutbox that carries a rank's output in its stage row, and the slot check's wait
for executors to register (cluster_for_launch) with a scripted cluster."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from spark_hvd.errors import NotEnoughSlotsError, RankFailure
from spark_hvd.launch.driver import launch_checks
from spark_hvd.launch.driver.launch_checks import ClusterShape, cluster_for_launch, resolve_num_proc
from spark_hvd.launch.task.stage_outbox import StageOutbox, frames_from_bytes


class TestStageOutbox:
    def test_frames_round_trip_in_the_order_sent(self) -> None:
        outbox = StageOutbox()
        outbox.send_line("stdout", "hello")
        outbox.send_event({"epoch": 1})
        outbox.send_line("stderr", "warn")
        outbox.send_failure(RankFailure(1, "ValueError: x", traceback="Traceback ...\nValueError: x"))
        outbox.send_notice("exited late")
        frames = frames_from_bytes(outbox.to_bytes())
        assert [f["kind"] for f in frames] == ["line", "event", "line", "failure", "notice"]
        assert frames[0] == {"kind": "line", "stream": "stdout", "text": "hello"}
        assert RankFailure.from_wire(1, frames[3]).traceback.endswith("ValueError: x")
        assert not outbox.driver_listening

    def test_old_lines_are_dropped_past_the_cap_but_never_events_or_failures(self) -> None:
        outbox = StageOutbox(max_line_chars=10)
        outbox.send_event({"i": 0})
        for i in range(6):
            outbox.send_line("stdout", f"line{i}")   # 5 characters each: two fit
        outbox.send_failure(RankFailure(0, "boom"))
        frames = frames_from_bytes(outbox.to_bytes())
        assert [f.get("text") for f in frames if f["kind"] == "line"] == ["line4", "line5"]
        assert frames[0]["kind"] == "notice" and "4 earlier output line(s) dropped" in frames[0]["text"]
        assert [f["kind"] for f in frames[1:]] == ["event", "line", "line", "failure"]

    def test_unreadable_stage_output_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="not a list of frames"):
            frames_from_bytes(b'{"kind": "line"}')


def _session(started_s_ago: float, conf: dict[str, str] | None = None) -> Any:
    settings = dict(conf or {})
    return SimpleNamespace(sparkContext=SimpleNamespace(startTime=int((time.time() - started_s_ago) * 1000)),
                           conf=SimpleNamespace(get=lambda key, default=None: settings.get(key, default)))


class _Registering:
    """describe() of a cluster whose slot count follows ``counts``, one per call (the last one stays)."""

    def __init__(self, counts: list[int], master: str = "spark://127.0.0.1:7077", task_cpus: int = 1,
                 dynamic_allocation: bool = False) -> None:
        self.counts, self.master, self.calls = counts, master, 0
        self.task_cpus, self.dynamic_allocation = task_cpus, dynamic_allocation

    def __call__(self, spark: Any) -> ClusterShape:
        slots = self.counts[min(self.calls, len(self.counts) - 1)]
        self.calls += 1
        return ClusterShape(self.master, slots=slots, task_cpus=self.task_cpus,
                            dynamic_allocation=self.dynamic_allocation)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch_checks, "_SLOT_POLL_S", 0.01)


class TestWaitForRegistration:
    def test_no_slots_yet_waits_for_executors_even_after_the_window(self) -> None:
        cluster = _Registering([0, 0, 0, 2])
        shape = cluster_for_launch(_session(started_s_ago=600), 2, start_timeout_s=30, describe=cluster)
        assert shape.slots == 2 and cluster.calls == 4

    def test_no_slots_within_the_start_timeout_is_a_shortage(self) -> None:
        began = time.monotonic()
        shape = cluster_for_launch(_session(600), 2, start_timeout_s=0.3, describe=_Registering([0]))
        assert 0.3 <= time.monotonic() - began < 5
        with pytest.raises(NotEnoughSlotsError, match="num_proc=2 .* the cluster has 0"):
            resolve_num_proc(2, shape)

    def test_num_proc_waits_for_its_slots_long_after_the_registration_window(self) -> None:
        cluster = _Registering([1, 1, 2])
        said: list[str] = []
        shape = cluster_for_launch(_session(600), 2, start_timeout_s=600, describe=cluster, on_wait=said.append)
        assert shape.slots == 2 and cluster.calls == 3
        assert said == ["1 of 2 task slots registered, waiting (up to start_timeout=600s)"]

    def test_num_proc_short_after_the_start_timeout_is_a_shortage(self) -> None:
        began = time.monotonic()
        shape = cluster_for_launch(_session(600), 2, start_timeout_s=0.3, describe=_Registering([1]))
        assert 0.3 <= time.monotonic() - began < 5
        with pytest.raises(NotEnoughSlotsError, match="num_proc=2 .* the cluster has 1"):
            resolve_num_proc(2, shape)

    def test_elastic_short_once_registration_is_over_goes_on_at_once(self) -> None:
        cluster = _Registering([1, 2])
        shape = cluster_for_launch(_session(600), 2, start_timeout_s=600, describe=cluster, wait_for_num_proc=False)
        assert shape.slots == 1 and cluster.calls == 1

    @pytest.mark.parametrize("conf, master", [
        ({"spark.cores.max": "3"}, "spark://127.0.0.1:7077"),
        ({"spark.cores.max": "7", "spark.task.cpus": "2"}, "spark://127.0.0.1:7077"),
        ({"spark.executor.instances": "3"}, "k8s://https://10.0.0.1:443"),
        ({"spark.executor.instances": "2", "spark.executor.cores": "1"}, "yarn"),
    ])
    def test_a_shortage_the_settings_cap_fails_at_once(self, conf: dict[str, str], master: str) -> None:
        cluster = _Registering([1, 8], master=master, task_cpus=int(conf.get("spark.task.cpus", "1")))
        assert cluster_for_launch(_session(600, conf), 4, start_timeout_s=600, describe=cluster).slots == 1
        assert cluster.calls == 1

    def test_dynamic_allocation_never_waits(self) -> None:
        cluster = _Registering([0, 4], dynamic_allocation=True)
        shape = cluster_for_launch(_session(0), 4, start_timeout_s=600, describe=cluster)
        assert shape.slots == 0 and cluster.calls == 1

    def test_short_while_spark_still_registers_executors_waits(self) -> None:
        cluster = _Registering([1, 1, 2])
        shape = cluster_for_launch(_session(0, {"spark.scheduler.maxRegisteredResourcesWaitingTime": "1min"}),
                                   2, start_timeout_s=600, describe=cluster)
        assert shape.slots == 2 and cluster.calls == 3

    def test_counting_all_slots_waits_out_the_registration_window(self) -> None:
        cluster = _Registering([1, 1, 1, 2])
        began = time.monotonic()
        shape = cluster_for_launch(_session(0, {"spark.scheduler.maxRegisteredResourcesWaitingTime": "500ms"}),
                                   None, start_timeout_s=600, describe=cluster)
        assert shape.slots == 2 and time.monotonic() - began >= 0.4

    def test_a_local_master_never_waits(self) -> None:
        cluster = _Registering([0, 2], master="local[2]")
        assert cluster_for_launch(_session(0), 2, start_timeout_s=600, describe=cluster).slots == 0
        assert cluster.calls == 1

    @pytest.mark.parametrize("text, seconds", [("30s", 30), ("500ms", 0.5), ("2min", 120), ("45", 45),
                                               (None, 30), ("soon", 30)])
    def test_spark_time_settings(self, text: str | None, seconds: float) -> None:
        assert launch_checks._seconds(text, 30.0) == pytest.approx(seconds)


def test_a_session_that_waited_for_all_executors_has_no_window_left() -> None:
    cluster = _Registering([1, 2])
    spark = _session(0, {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
                         "spark.scheduler.maxRegisteredResourcesWaitingTime": "1min"})
    assert cluster_for_launch(spark, None, start_timeout_s=600, describe=cluster).slots == 1


class TestStageStartWatch:
    def test_fires_once_when_the_stage_runs_all_its_tasks(self) -> None:
        from spark_hvd.launch.driver.connect_session import StageStartWatch

        handlers: list[Any] = []
        spark = SimpleNamespace(registerProgressHandler=handlers.append, removeProgressHandler=handlers.remove)
        fired: list[bool] = []
        stage = SimpleNamespace(num_tasks=2, num_completed_tasks=0)
        with StageStartWatch(spark, 2, lambda: fired.append(True)) as watch:
            assert handlers == [watch]
            watch([stage], 1, "op", False)   # one task running: the barrier stage has not started
            assert fired == []
            watch([stage], 2, "op", False)
            watch([stage], 2, "op", False)
        assert fired == [True] and handlers == []

    def test_a_stage_that_already_finished_tasks_counts_as_started(self) -> None:
        from spark_hvd.launch.driver.connect_session import StageStartWatch

        fired: list[bool] = []
        spark = SimpleNamespace(registerProgressHandler=lambda h: None, removeProgressHandler=lambda h: None)
        with StageStartWatch(spark, 2, lambda: fired.append(True)) as watch:
            watch([SimpleNamespace(num_tasks=2, num_completed_tasks=1)], 0, "op", False)
        assert fired == [True]

    def test_without_progress_reports_the_ranks_count_as_started_at_once(self) -> None:
        from spark_hvd.launch.driver.connect_session import StageStartWatch

        fired: list[bool] = []
        with StageStartWatch(SimpleNamespace(), 2, lambda: fired.append(True)):
            assert fired == [True]
