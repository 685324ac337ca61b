"""spark_hvd.run on a local[2] session: results, init styles, output, failures, cancellation."""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest

import spark_hvd
from capture import WatchedStream, wait_for_exit
from rank_functions import (
    allreduce_rank_vectors,
    block_forever,
    chatty,
    echo_args,
    emit_numbered_events,
    exit_on_rank,
    horovod_style,
    raise_on_rank,
    reinit_with_overrides,
    torch_horovod_style,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def test_two_ranks_allreduce_and_results_come_back_in_rank_order(local_spark) -> None:
    results = spark_hvd.run(allreduce_rank_vectors, args=(5,), num_proc=2, spark=local_spark)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["size"] == 2
        assert r["sum"] == [1.0] * 5  # 0 + 1 on every element


def test_num_proc_defaults_to_the_task_slots(local_spark) -> None:
    assert [r["rank"] for r in spark_hvd.run(allreduce_rank_vectors, args=(1,))] == [0, 1]


def test_args_and_kwargs_reach_fn(local_spark) -> None:
    results = spark_hvd.run(echo_args, args=(1, "a"), kwargs={"k": [2]}, num_proc=2)
    assert results == [(0, (1, "a"), {"k": [2]}), (1, (1, "a"), {"k": [2]})]


def test_horovod_style_init_inside_fn_finds_the_job(local_spark) -> None:
    results = spark_hvd.run(horovod_style, args=(3,), num_proc=2)
    assert [r["sum"] for r in results] == [[1.0] * 3, [1.0] * 3]


def test_init_with_arguments_rebuilds_the_mesh_with_them(local_spark) -> None:
    # enable_shm=False must take effect: 2.0 from the allreduce, and no +100 for shared memory.
    assert spark_hvd.run(reinit_with_overrides, num_proc=2) == [2.0, 2.0]


def test_a_horovod_style_torch_loop_runs_and_stays_in_sync(local_spark) -> None:
    pytest.importorskip("torch")
    weights = spark_hvd.run(torch_horovod_style, num_proc=2)
    # Same weights after the broadcast and one step on averaged gradients: ranks agree.
    assert weights[0] == weights[1]


def test_output_lines_of_both_ranks_stream_to_the_driver(local_spark) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert spark_hvd.run(chatty, args=(3,), num_proc=2, stdout=out, stderr=err) == [0, 1]
    for rank in (0, 1):
        for i in range(3):
            assert f"[{rank}]<stdout>:rank {rank} line {i}\n" in out.getvalue()
        assert f"[{rank}]<stderr>:rank {rank} to stderr\n" in err.getvalue()


def test_events_reach_the_driver_callback_in_order_per_rank(local_spark) -> None:
    received: list[tuple[int, dict]] = []
    caller = threading.get_ident()
    threads: set[int] = set()

    def on_event(rank: int, data: dict) -> None:
        threads.add(threading.get_ident())
        received.append((rank, data))

    assert spark_hvd.run(emit_numbered_events, args=(50,), num_proc=2, on_event=on_event) == [50, 50]
    for rank in (0, 1):
        assert [d["i"] for r, d in received if r == rank] == list(range(50))
        assert all(d["rank"] == rank for r, d in received if r == rank)
    assert threads == {caller}


def test_a_failing_event_callback_ends_the_job_with_its_error(local_spark) -> None:
    def on_event(rank: int, data: dict) -> None:
        raise KeyError(f"bad event from rank {rank}")

    with pytest.raises(KeyError, match="bad event from rank"):
        spark_hvd.run(emit_numbered_events, args=(3,), num_proc=2, on_event=on_event)


def test_emit_event_outside_a_run_reports_that_nobody_listens() -> None:
    assert spark_hvd.emit_event({"x": 1}) is False
    with pytest.raises(TypeError, match="mapping"):
        spark_hvd.emit_event(["not", "a", "mapping"])


def test_verbose_0_keeps_rank_output_quiet(local_spark) -> None:
    out = io.StringIO()
    spark_hvd.run(chatty, args=(1,), num_proc=2, stdout=out, stderr=io.StringIO(), verbose=0)
    assert out.getvalue() == ""


def test_exception_on_rank_1_names_it_with_traceback_and_last_lines(local_spark) -> None:
    start = time.monotonic()
    with pytest.raises(spark_hvd.RunError) as caught:
        spark_hvd.run(raise_on_rank, args=(1,), num_proc=2, stdout=io.StringIO(), stderr=io.StringIO())
    assert time.monotonic() - start < 30
    error = caught.value
    assert error.rank == 1
    assert "ValueError: boom from rank 1" in error.failure.summary
    assert 'raise ValueError(f"boom from rank {bad_rank}")' in error.failure.traceback
    assert error.last_lines == ["about to raise"]
    assert "rank 1 failed" in str(error) and "about to raise" in str(error)


def test_os_exit_on_rank_1_names_it_and_its_exit_code(local_spark) -> None:
    start = time.monotonic()
    with pytest.raises(spark_hvd.RunError) as caught:
        spark_hvd.run(exit_on_rank, args=(1, 3), num_proc=2, stdout=io.StringIO(), stderr=io.StringIO())
    assert time.monotonic() - start < 30
    assert caught.value.rank == 1
    assert caught.value.failure.exit_code == 3
    assert "exited with code 3" in str(caught.value)
    assert "about to exit" in caught.value.last_lines


def test_more_ranks_than_slots_fails_at_once_with_the_slot_count(local_spark) -> None:
    start = time.monotonic()
    with pytest.raises(spark_hvd.NotEnoughSlotsError) as caught:
        spark_hvd.run(allreduce_rank_vectors, args=(1,), num_proc=3)
    assert time.monotonic() - start < 30
    assert caught.value.slots == 2
    assert "num_proc=3" in str(caught.value) and "has 2" in str(caught.value)


def test_ranks_that_do_not_start_in_time_end_the_run_with_the_slot_count(local_spark) -> None:
    # No task can connect within 10 ms of the launch, so this is the path of a cluster whose
    # slots are held by other jobs.
    with pytest.raises(spark_hvd.StartTimeoutError, match=r"did not start within .* has 2 task slot"):
        spark_hvd.run(allreduce_rank_vectors, args=(1,), num_proc=2, start_timeout=0.01)


def test_cancelling_the_spark_job_stops_the_ranks(local_spark) -> None:
    out = WatchedStream()
    outcome: dict[str, BaseException] = {}

    def launch() -> None:
        try:
            # From a thread of its own, which has no active session: run() finds the default one.
            spark_hvd.run(block_forever, num_proc=2, stdout=out, stderr=io.StringIO())
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e
            out.write(f"LAUNCHER ENDED: {e!r}\n")

    launcher = threading.Thread(target=launch, daemon=True)
    launcher.start()
    matches = out.wait_for_matches(r"\]<stdout>:pid (\d+)", 2, timeout_s=60, give_up_on="LAUNCHER ENDED")
    pids = [int(m.group(1)) for m in matches]
    try:
        local_spark.sparkContext.cancelAllJobs()
        launcher.join(60)
        assert not launcher.is_alive(), "run() did not return after the job was cancelled"
        assert isinstance(outcome.get("error"), spark_hvd.SparkJobError), outcome
        assert "cancelled" in str(outcome["error"])
        for pid in pids:
            assert wait_for_exit(pid, 30), f"rank process {pid} survived the cancelled job"
    finally:
        for pid in pids:  # only if the assertions above failed: never leave them behind
            if not wait_for_exit(pid, 0):
                os.kill(pid, signal.SIGKILL)


def test_a_run_after_failures_works(local_spark) -> None:
    assert [r["rank"] for r in spark_hvd.run(allreduce_rank_vectors, args=(2,), num_proc=2)] == [0, 1]
