"""keep_warm: a Spark worker keeps a zygote that imported the framework and forks the next runs' rank
processes (or, where forking is unsafe, a spare the next run adopts); each run still gets a fresh process
and a fresh collective job, with nothing left over."""

from __future__ import annotations

import io
import os

import pytest

import spark_hvd
from collective.config import ENV_TIMEOUT
from rank_functions import environment_of, fail_on_rank, loaded_and_parent, process_state

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_next_run_adopts_a_spare_that_imported_the_modules_and_carries_nothing_over(local_spark) -> None:
    first = spark_hvd.run(process_state, args=("first",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    assert [r["rank"] for r in first] == [0, 1] and all(r["sum"] == 2.0 for r in first)
    second = spark_hvd.run(process_state, args=("second",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    assert [(r["rank"], r["size"], r["sum"]) for r in second] == [(0, 2, 2.0), (1, 2, 2.0)]
    # Fresh processes: no pid again, no marker module nor variable the first run's fn left.
    assert not {r["pid"] for r in second} & {r["pid"] for r in first}
    assert all(r["markers"] == [] and r["env_marker"] is None for r in second), second
    # At least one rank ran in a spare left by the first run (which rank lands on which worker is Spark's
    # choice; local[2] keeps two workers, so normally both do).
    assert any(r["preloaded"] for r in second), second


def test_later_runs_fork_their_processes_from_one_zygote_per_worker(local_spark) -> None:
    """The first run leaves a zygote in each worker; the next runs' rank processes are its children, a new
    one per run, and none sees what an earlier run's fn left in its process."""
    runs = [spark_hvd.run(process_state, args=(f"run{i}",), num_proc=2, spark=local_spark, keep_warm=["wave"])
            for i in range(3)]
    _, second, third = runs     # (the first may fork from a zygote an earlier test left)
    # Which worker each rank lands in is Spark's choice; local[2] normally keeps the same two.
    forked = [r for r in second + third if r["parent"][1] == "zygote"]
    assert forked, runs
    assert all(r["preloaded"] for r in forked), forked
    zygotes = {r["parent"][0] for r in second if r["parent"][1] == "zygote"}
    assert zygotes & {r["parent"][0] for r in third if r["parent"][1] == "zygote"}, runs
    pids = [r["pid"] for run in runs for r in run]
    assert len(set(pids)) == len(pids), runs
    assert all(r["markers"] == [] and r["env_marker"] is None for r in second + third), runs
    assert all((r["rank"], r["size"], r["sum"]) == (i, 2, 2.0) for run in runs for i, r in enumerate(run)), runs
    draws = [r["draw"] for run in runs for r in run]
    assert len(set(draws)) == len(draws), runs


def test_a_forked_rank_that_is_killed_is_reported_with_its_signal(local_spark) -> None:
    spark_hvd.run(process_state, args=("warm",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    with pytest.raises(spark_hvd.RunError) as caught:
        spark_hvd.run(fail_on_rank, args=("kill_child", 1), num_proc=2, spark=local_spark, keep_warm=["wave"],
                      env={ENV_TIMEOUT: "3"}, stdout=io.StringIO(), stderr=io.StringIO())
    assert caught.value.rank == 1, str(caught.value)
    assert "killed by signal SIGKILL" in caught.value.failure.summary, str(caught.value)
    # A failed run ends its Spark tasks' workers (Spark kills the cancelled one), their zygotes with them;
    # the next run leaves new ones.
    spark_hvd.run(process_state, args=("after",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    again = spark_hvd.run(process_state, args=("again",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    assert any(r["parent"][1] == "zygote" for r in again), again


def test_a_zygote_whose_imports_left_a_thread_running_is_adopted_as_a_spare(local_spark) -> None:
    """Forking a process with threads is unsafe: the zygote stays a plain spare, which the next run adopts."""
    # The ranks import the test's module from here (the spare and the runs' own env are keyed alike).
    env = {"PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}
    spark_hvd.run(environment_of, args=("X",), num_proc=2, spark=local_spark, keep_warm=["thread_at_import"],
                  env=env)
    later = [spark_hvd.run(loaded_and_parent, args=("thread_at_import",), num_proc=2, spark=local_spark,
                           keep_warm=["thread_at_import"], env=env) for _ in range(2)]
    assert all(parent == "task" for run in later for _, parent in run), later
    # Each run adopted the spare the run before it left, which had imported the module (and its thread).
    assert any(loaded for run in later for loaded, _ in run), later


def test_a_spare_is_adopted_after_another_job_changed_its_workers_environment(local_spark) -> None:
    """The worker's own variables may change between runs; the adopted spare takes the task's environment."""
    def set_worker_variable(batches):   # nested: Spark pickles it by value
        import os

        os.environ["SPARK_HVD_TEST_WORKER_VARIABLE"] = "set by another job"   # as pyspark's TorchDistributor does
        yield from batches

    spark_hvd.run(process_state, args=("before",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    local_spark.range(0, 2, 1, 2).mapInArrow(set_worker_variable, "id long").collect()
    after = spark_hvd.run(environment_of, args=("SPARK_HVD_TEST_WORKER_VARIABLE",), num_proc=2, spark=local_spark,
                          keep_warm=["wave"])
    assert any(preloaded for preloaded, _ in after), after
    assert all(value in ("set by another job", None) for _, value in after)
    assert any(preloaded and value == "set by another job" for preloaded, value in after), after


def test_a_spare_of_another_environment_is_not_adopted(local_spark) -> None:
    spark_hvd.run(process_state, args=("a",), num_proc=2, spark=local_spark, keep_warm=["wave"])
    other = spark_hvd.run(process_state, args=("b",), num_proc=2, spark=local_spark, keep_warm=["wave"],
                          env={"SPARK_HVD_TEST_OTHER": "1"})
    assert not any(r["preloaded"] for r in other), other
    without = spark_hvd.run(process_state, args=("c",), num_proc=2, spark=local_spark)
    assert not any(r["preloaded"] for r in without), without


def test_keep_warm_must_name_modules(local_spark) -> None:
    with pytest.raises(TypeError, match=r"keep_warm must be a list of module names"):
        spark_hvd.run(process_state, args=("x",), num_proc=2, spark=local_spark, keep_warm=["not a module"])


def test_a_job_that_hides_the_workers_gpus_retires_their_spares_once(local_spark) -> None:
    """pyspark's TorchDistributor(use_gpu=False) sets CUDA_VISIBLE_DEVICES="" in the Python workers its tasks
    run in and leaves it so. A spare started before may have initialised CUDA with every GPU visible, so it is
    not adopted (this is why a TorchDistributor job between two fits left no spare to adopt); the spares the
    next run leaves carry the new value, and the run after that adopts them."""
    def hide_gpus(batches):   # nested: Spark pickles it by value
        import os

        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        yield from batches

    def unhide_gpus(batches):
        import os

        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        yield from batches

    try:
        spark_hvd.run(process_state, args=("before",), num_proc=2, spark=local_spark, keep_warm=["wave"])
        local_spark.range(0, 2, 1, 2).mapInArrow(hide_gpus, "id long").collect()
        after = spark_hvd.run(environment_of, args=("CUDA_VISIBLE_DEVICES",), num_proc=2, spark=local_spark,
                              keep_warm=["wave"])
        # (Which worker each task lands in is Spark's choice; local[2] normally keeps the same two.)
        assert any(value == "" for _, value in after), after
        assert not any(preloaded for preloaded, value in after if value == ""), after
        again = spark_hvd.run(environment_of, args=("CUDA_VISIBLE_DEVICES",), num_proc=2, spark=local_spark,
                              keep_warm=["wave"])
        assert any(preloaded and value == "" for preloaded, value in again), again
    finally:
        local_spark.range(0, 2, 1, 2).mapInArrow(unhide_gpus, "id long").collect()
