"""RankFeed: a rank's lockstep batches of one split, the same for torch, Keras and Lightning."""

from __future__ import annotations

import numpy as np
import pytest

from spark_hvd.data.feed.rank_feed import RankFeed, Transformation
from spark_hvd.errors import InputError


class _Reader:
    """Endless batches of 2 rows, each (epoch, position, row), as a ShardReader wraps its shard."""

    def __init__(self) -> None:
        self.closed = False
        self.read: list[tuple[int, int]] = []

    def batches(self, epoch: int):
        position = 0
        while True:
            self.read.append((epoch, position))
            yield {"x": np.array([[epoch, position, 0], [epoch, position, 1]], dtype=np.float32)}
            position += 1

    def close(self) -> None:
        self.closed = True


def test_an_epoch_is_exactly_its_steps_and_a_resume_skips_what_was_trained() -> None:
    reader = _Reader()
    feed = RankFeed(reader, steps=4)
    assert [int(b["x"][0, 1]) for b in feed.epoch(3)] == [0, 1, 2, 3]
    # Resumed after 3 steps: the epoch's sequence is the reader's, the first 3 read but not yielded.
    assert [int(b["x"][0, 1]) for b in feed.epoch(5, skip=3)] == [3]
    assert reader.read[-4:] == [(5, 0), (5, 1), (5, 2), (5, 3)]
    feed.close()
    assert reader.closed


def test_the_transformation_runs_on_the_batches_yielded_only() -> None:
    calls = []

    def double(row):
        calls.append(int(row["x"][1]))
        return {"x": row["x"] * 2, "y": np.float32(1)}

    feed = RankFeed(_Reader(), steps=3, transformation=Transformation(double, [("y", np.int64, (), False)]))
    batches = list(feed.epoch(1, skip=1))
    assert calls == [1, 1, 2, 2]             # two rows each of positions 1 and 2; position 0 skipped
    assert batches[0]["x"].tolist() == [[2, 2, 0], [2, 2, 2]] and batches[0]["y"].dtype == np.int64


def test_a_transformation_that_drops_a_column_on_some_rows_is_named() -> None:
    def flaky(row):
        return {"x": row["x"]} if row["x"][2] == 0 else {}

    with pytest.raises(InputError, match="returned column 'x' for some rows but not row"):
        list(RankFeed(_Reader(), steps=2, transformation=Transformation(flaky)).epoch(0))
