"""spark_hvd.run_elastic follows Horovod's rule for an exception of fn's own: the job re-forms from the last commit
and tries again, up to reset_limit; errors a retry cannot help fail at once, as fn's own exception naming its rank.
The first test is Horovod's test_happy_run_elastic_fault_tolerant scenario (three failures at given ranks, epochs
and batches), written here from its description."""

from __future__ import annotations

import io

import pytest

import spark_hvd
from spark_hvd.errors import NonFiniteLossError
from elastic_functions import epochs_with_failures, torch_elastic_train

pytestmark = [pytest.mark.usefixtures("elastic_functions_by_value"), pytest.mark.spark, pytest.mark.timeout(300)]


def _markers(directory, *failures: tuple[int, int, int]) -> str:
    for rank, epoch, batch in failures:
        (directory / f"rank_{rank}_epoch_{epoch}_batch_{batch}_fail").touch()
    return str(directory)


def test_horovods_fault_tolerant_scenario_retries_each_failure_from_the_last_commit(local_spark, tmp_path) -> None:
    marker_dir = _markers(tmp_path, (1, 2, 4), (0, 3, 1), (1, 4, 2))
    err = io.StringIO()
    results = spark_hvd.run_elastic(epochs_with_failures, args=(2, 5, 5, marker_dir), num_proc=2, min_np=2,
                                    max_np=2, start_timeout=60, stdout=io.StringIO(), stderr=err,
                                    spark=local_spark)
    # Every rank ends at epoch 4, batch 0, after the 4th rendezvous: one per failure, plus the first.
    assert results == [([0, 4, 0, 4, 1, 4, 0, 4], 0), ([0, 4, 0, 4, 1, 4, 0, 4], 1)], err.getvalue()
    history = err.getvalue()
    assert "rank 1 raised RuntimeError: training failed at epoch 2 batch 4: restart; retrying from" in history
    assert "elastic stage 4: 2 rank(s)" in history and "elastic stage 5" not in history, history


def test_when_the_retries_run_out_the_error_is_fns_own_with_its_rank_and_the_resets(local_spark, tmp_path) -> None:
    marker_dir = _markers(tmp_path, (1, 1, 2), (0, 2, 3))
    with pytest.raises(RuntimeError, match="training failed at epoch 2 batch 3") as raised:
        spark_hvd.run_elastic(epochs_with_failures, args=(2, 5, 4, marker_dir), num_proc=2, reset_limit=1,
                              start_timeout=60, stdout=io.StringIO(), stderr=io.StringIO(), spark=local_spark)
    assert type(raised.value) is RuntimeError          # the user's own class, not a wrapper of ours
    note = "\n".join(raised.value.__notes__)
    assert "raised by fn on rank 0 after 1 reset(s) of the job; not retried: reset_limit=1" in note, note
    assert "Traceback from rank 0:" in note and "fail_once" in note, note
    assert isinstance(raised.value.__cause__, spark_hvd.RunError) and raised.value.__cause__.rank == 0


def test_an_error_before_the_first_commit_is_not_retried(local_spark, tmp_path) -> None:
    err = io.StringIO()
    with pytest.raises(ValueError, match="bad batch at step 2") as raised:
        spark_hvd.run_elastic(torch_elastic_train, args=(6, 3, str(tmp_path)), kwargs={"fail_rank": 1},
                              num_proc=2, stdout=io.StringIO(), stderr=err, spark=local_spark)
    assert "on rank 1 after 0 reset(s) of the job; not retried: it was raised before the first commit" in \
        "\n".join(raised.value.__notes__)
    assert raised.value.__cause__.rank == 1
    assert "elastic stage 2" not in err.getvalue()


def test_an_error_raised_again_before_a_new_commit_is_not_retried_again(local_spark, tmp_path) -> None:
    # fail_rank raises at step 2 of every stage; the commit at step 1 is the one every retry starts from.
    with pytest.raises(ValueError, match="bad batch at step 2") as raised:
        spark_hvd.run_elastic(torch_elastic_train, args=(6, 1, str(tmp_path)), kwargs={"fail_rank": 0},
                              num_proc=2, stdout=io.StringIO(), stderr=io.StringIO(), spark=local_spark)
    assert "after 1 reset(s) of the job; not retried: it was raised again before any commit after the retry" in \
        "\n".join(raised.value.__notes__)


def test_an_error_whose_class_says_a_retry_cannot_help_fails_at_once(local_spark, tmp_path) -> None:
    err = io.StringIO()
    with pytest.raises(NonFiniteLossError) as raised:
        spark_hvd.run_elastic(torch_elastic_train, args=(6, 1, str(tmp_path)),
                              kwargs={"fail_rank": 1, "fail_with": "nonfinite"}, num_proc=2,
                              stdout=io.StringIO(), stderr=err, spark=local_spark)
    assert "not retried: its class says a retry cannot help" in "\n".join(raised.value.__notes__)
    assert "elastic stage 2" not in err.getvalue()
