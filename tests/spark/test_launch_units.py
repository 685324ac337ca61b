"""The launcher's pure parts, without Spark: GPU mapping, launch checks, frames, error text."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from spark_hvd.errors import (
    DynamicAllocationError,
    LaunchError,
    NotEnoughSlotsError,
    RankFailure,
    RunError,
    spark_error_summary,
)
from spark_hvd.launch.framing import FrameError, read_frame, write_frame
from spark_hvd.launch.task.gpus import visible_devices
from spark_hvd.launch.driver.launch_checks import ClusterShape, describe_cluster, resolve_num_proc


class TestVisibleDevices:
    def test_unrestricted_executor_uses_spark_addresses(self) -> None:
        assert visible_devices(["1", "3"], None) == "1,3"
        assert visible_devices(["2"], "") == "2"

    def test_addresses_index_into_an_existing_restriction(self) -> None:
        assert visible_devices(["0"], "4,6") == "4"
        assert visible_devices(["1", "0"], "4, 6") == "6,4"

    def test_uuid_addresses_listed_in_the_restriction_pass_through(self) -> None:
        assert visible_devices(["GPU-b"], "GPU-a,GPU-b") == "GPU-b"

    def test_an_address_outside_the_restriction_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="neither an index into nor a member"):
            visible_devices(["5"], "4,6")

    def test_no_address_is_an_error(self) -> None:
        with pytest.raises(ValueError):
            visible_devices([], None)


class TestResolveNumProc:
    def test_defaults_to_all_slots(self) -> None:
        assert resolve_num_proc(None, ClusterShape("local[4]", slots=4)) == 4

    def test_more_than_the_slots_names_both_counts(self) -> None:
        with pytest.raises(NotEnoughSlotsError, match=r"num_proc=3 .* the cluster has 2") as caught:
            resolve_num_proc(3, ClusterShape("spark://m:7077", slots=2, task_gpus="1"))
        assert (caught.value.num_proc, caught.value.slots) == (3, 2)
        assert "spark.task.resource.gpu.amount=1" in str(caught.value)

    def test_unknown_slots_trust_num_proc_but_cannot_default(self) -> None:
        assert resolve_num_proc(8, ClusterShape("(Spark Connect)", slots=None)) == 8
        with pytest.raises(LaunchError, match="pass num_proc"):
            resolve_num_proc(None, ClusterShape("(Spark Connect)", slots=None))

    def test_dynamic_allocation_is_refused_by_name(self) -> None:
        with pytest.raises(DynamicAllocationError, match="spark.dynamicAllocation.enabled=true"):
            resolve_num_proc(2, ClusterShape("yarn", slots=8, dynamic_allocation=True))

    @pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
    def test_num_proc_must_be_a_positive_int(self, bad: object) -> None:
        with pytest.raises(ValueError):
            resolve_num_proc(bad, ClusterShape("local[2]", slots=2))  # type: ignore[arg-type]


def _fake_session(master: str, conf: dict[str, str], default_parallelism: int) -> SimpleNamespace:
    # No _jsc: describe_cluster must fall back to defaultParallelism / spark.task.cpus.
    context = SimpleNamespace(master=master, defaultParallelism=default_parallelism,
                              getConf=lambda: SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))
    return SimpleNamespace(sparkContext=context)


def test_describe_cluster_sees_dynamic_allocation_on_a_real_cluster_only() -> None:
    conf = {"spark.dynamicAllocation.enabled": "true", "spark.task.cpus": "2"}
    on_yarn = describe_cluster(_fake_session("yarn", conf, 8))
    assert on_yarn.dynamic_allocation and on_yarn.slots == 4
    # Spark ignores dynamic allocation in local mode, and so do we.
    assert not describe_cluster(_fake_session("local[2]", conf, 2)).dynamic_allocation
    assert describe_cluster(_fake_session("local-cluster[2,1,1024]", conf, 2)).dynamic_allocation


class TestFrames:
    def test_round_trip(self) -> None:
        stream = io.BytesIO()
        write_frame(stream, {"kind": "a", "n": 1}, b"\x00blob")
        write_frame(stream, {"kind": "b"})
        stream.seek(0)
        assert read_frame(stream) == ({"kind": "a", "n": 1}, b"\x00blob")
        assert read_frame(stream) == ({"kind": "b"}, b"")
        assert read_frame(stream) is None

    def test_truncated_frame_is_an_error(self) -> None:
        stream = io.BytesIO()
        write_frame(stream, {"kind": "a"}, b"0123456789")
        with pytest.raises(FrameError):
            read_frame(io.BytesIO(stream.getvalue()[:-3]))

    def test_oversized_blob_is_refused_before_reading_it(self) -> None:
        stream = io.BytesIO()
        write_frame(stream, {"kind": "a"}, b"x" * 100)
        stream.seek(0)
        with pytest.raises(FrameError, match="exceeds"):
            read_frame(stream, max_blob_bytes=10)


def test_run_error_message_names_rank_traceback_lines_and_others() -> None:
    root = RankFailure(1, "ValueError: boom", traceback="Traceback...\nValueError: boom\n", exit_code=1)
    other = RankFailure(0, "PeerFailureError: rank 1 left", peer_failure=True)
    text = str(RunError(root, ["step 1", "step 2"], [other]))
    assert text.startswith("spark_hvd.run: rank 1 failed: ValueError: boom")
    assert "Traceback from rank 1:\nTraceback...\nValueError: boom" in text
    assert "  step 1\n  step 2" in text
    assert "rank 0 also failed: PeerFailureError" in text


def test_spark_error_summary_finds_the_python_exception_or_the_spark_reason() -> None:
    python_failure = RuntimeError(
        "An error occurred while calling o89.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: ...\n"
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown "
        "from the Python worker: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "    connect()\n"
        "ConnectionError: rank 1 cannot reach the driver\n"
        " SQLSTATE: 38000\n")
    assert spark_error_summary(python_failure) == "ConnectionError: rank 1 cannot reach the driver"
    cancelled = RuntimeError("An error occurred while calling o45.collectToPython.\n"
                             ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 0 cancelled\n"
                             "\tat org.apache.spark.errors.SparkCoreErrors$.sparkJobCancelled(x)\n")
    assert spark_error_summary(cancelled) == (
        "org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 0 cancelled")
    assert spark_error_summary(RuntimeError("")) == "RuntimeError"
