"""Every row of an epoch is trained once, at any world size: the ranks write down each row id they train
(row_recording.py), and the counts must come out one per row (plus the lockstep padding the epoch's record
reports) after a rank is killed under elastic training with 3 -> 2 ranks, right after a commit and right
before one, and after a static fit killed mid-epoch is resumed with another num_proc."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import cloudpickle
import pytest
import torch

import row_recording
from estimator_data import blobs, with_ids
from estimator_elastic_job import run_rank_fn_elastic
from estimator_models import class_loss

pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

ROWS, BATCH = 576, 16      # 12 steps an epoch on 3 ranks, 18 on 2, 36 on 1: no rows left over at any size


@pytest.fixture(scope="module")
def frame(local_spark):
    """ROWS rows with a stable ``id``, and the ids."""
    df = with_ids(blobs(local_spark, ROWS))
    return df, sorted(row.id for row in df.select("id").collect())


@pytest.fixture
def ship_recording():
    cloudpickle.register_pickle_by_value(row_recording)
    yield
    cloudpickle.unregister_pickle_by_value(row_recording)


def _estimator(store, model, **overrides):
    from spark_hvd import TorchEstimator

    settings = dict(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
                    loss=class_loss, feature_cols=["features", "id"], label_cols=["label"], batch_size=BATCH,
                    epochs=1, store=store, verbose=0, shuffle=True, random_seed=11)
    settings.update(overrides)
    return TorchEstimator(**settings)


def _assert_once_each(counts: Counter, ids: list[int], padded: int) -> None:
    assert sorted(counts) == ids, "a row was never trained, or a row not in the data was"
    assert sum(counts.values()) - len(ids) == padded
    assert all(count <= 2 for count in counts.values())


def _elastic_fit(spark_frame, store, tmp_path: Path, name: str, kill_at_call: int) -> tuple[dict, Path]:
    """An elastic fit of 2 epochs on 3 ranks (commits every 3 steps) whose rank 1 is SIGKILLed at its
    ``kill_at_call``-th step, run under the local elastic launcher; (rank 0's result, the record)."""
    from spark_hvd.common.util import DEFAULT_SPLIT_SEED
    from spark_hvd.data import check_schema, materialize_checked

    df, _ = spark_frame
    record_dir = tmp_path / f"{name}-rows"
    record_dir.mkdir()
    model = row_recording.RecordingNet(4, 3, str(record_dir), fail=(1, kill_at_call, 3), kill=True)
    estimator = _estimator(store, model, num_proc=3, epochs=2, elastic=True, min_num_proc=1, max_num_proc=3,
                           elastic_commit_steps=3)
    schema = check_schema(df, ["features", "id"], ["label"], None, None)
    data = materialize_checked(df, store, schema, DEFAULT_SPLIT_SEED, 3)
    plan = estimator._plan(data, 3)
    assert plan.train_steps == 12
    result = run_rank_fn_elastic(tmp_path, estimator._rank_fn(plan), name, by_value=[row_recording], hosts=3)
    return result, record_dir


@pytest.mark.parametrize("kill_at_call, moment", [(7, "right after the commit at step 6"),
                                                  (6, "right before the commit at step 6")])
def test_a_rank_killed_under_elastic_training_3_to_2_trains_every_row_once(frame, store, tmp_path, kill_at_call,
                                                                         moment) -> None:
    result, record_dir = _elastic_fit(frame, store, tmp_path, f"kill-{kill_at_call}", kill_at_call)
    kept = 6 if kill_at_call > 6 else 3     # the steps of 3 ranks the last commit holds
    left = ROWS - kept * 3 * BATCH          # 288 or 432 rows: 9 steps of 2 ranks, or 14 with 16 rows of padding
    resumed_steps = -(-left // (2 * BATCH))
    reformation = result["reformations"][0]
    assert reformation == {"epoch": 0, "step": 18 - resumed_steps, "size": 2, "previous_size": 3}, moment
    epoch0, epoch1 = Counter(), Counter()
    for steps in row_recording.steps_by_process(record_dir):
        at_three = [ids for size, _, ids in steps if size == 3][:kept]
        at_two = [ids for size, _, ids in steps if size == 2]
        assert len(at_two) in (0, resumed_steps + 18)
        for ids in at_three + at_two[:resumed_steps]:
            epoch0.update(ids)
        for ids in at_two[resumed_steps:]:
            epoch1.update(ids)
    ids = frame[1]
    times = result["epoch_times"]
    assert [t["padded_rows"] for t in times] == [resumed_steps * 2 * BATCH - left, 0]
    assert [t["left_out_rows"] for t in times] == [0, 0]
    _assert_once_each(epoch0, ids, times[0]["padded_rows"])
    _assert_once_each(epoch1, ids, times[1]["padded_rows"])


def test_a_static_fit_killed_mid_epoch_resumes_with_another_num_proc_and_trains_every_row_once(
        frame, store, tmp_path, ship_recording) -> None:
    from spark_hvd import RunError

    df, ids = frame
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    # 2 ranks: 18 steps an epoch, a checkpoint every 4; rank 1 fails in its 7th step (the checkpoint at 4 holds).
    killed = row_recording.RecordingNet(4, 3, str(first), fail=(1, 7, 2))
    with pytest.raises(RunError, match="injected failure at step 7 of rank 1"):
        _estimator(store, killed, run_id="resized", checkpoint_every_steps=4).fit(df)
    resumed = _estimator(store, row_recording.RecordingNet(4, 3, str(second)), num_proc=1, run_id="resized",
                         checkpoint_every_steps=4).fit(df)
    counts = row_recording.trained_rows(first, {2: 4}) + row_recording.trained_rows(second, {1: None})
    times = resumed.getEpochTimes()
    assert len(times) == 1 and times[0]["ranks"] == 1
    _assert_once_each(counts, ids, times[0]["padded_rows"])
    # 576 - 4 * 2 * 16 = 448 rows left: 28 steps of one rank, from step 36 - 28.
    assert len(row_recording.steps_by_process(second)[0]) == 28
