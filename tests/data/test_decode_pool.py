"""Decode workers (RankFeed(workers=k)): real worker processes, real pickling, real Parquet through a real
ShardReader; every test closes its feeds, and the ones that wait on processes have a timeout."""

from __future__ import annotations

import io
import itertools
import os
import signal
import sys
import time

import numpy as np
import pytest

from split_helpers import write_split
from spark_hvd.data import make_reader
from spark_hvd.data.feed.decode_pool import DecodeWorkerDied, DecodeWorkerError, default_reader_workers
from spark_hvd.data.feed.rank_feed import RankFeed, Transformation
from spark_hvd.data.feed.transformation import BatchTransformation
from spark_hvd.recipe.plan import FitPlan

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def feeds():
    """Feeds made by a test, closed after it (workers included) whatever happened."""
    made: list[RankFeed] = []
    yield made
    for feed in made:
        feed.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reader(store, rows=90, batch_size=8, seed=7, rank=0):
    data = write_split(store, "k", file_rows=[rows // 2, rows - rows // 2], row_group_rows=10)
    return make_reader(data, "train", rank, 1, batch_size=batch_size, shuffle=True, seed=seed)


def _scaled(scale: float) -> Transformation:
    """A closure (pickled by value) that makes two columns of different shapes from each row."""
    def fn(row):
        return {"id": row["id"], "y": row["x"] * scale + row["id"], "norm": np.float64(np.linalg.norm(row["x"]))}

    return Transformation(fn, edit_fields=[("norm", np.float32, (), False)])


def _epochs(feed: RankFeed) -> list[dict[str, np.ndarray]]:
    return [*feed.epoch(0), *feed.epoch(1), *feed.epoch(2, skip=3)]


def _same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for name in x:
            assert x[name].dtype == y[name].dtype
            np.testing.assert_array_equal(x[name], y[name])


def test_0_1_and_3_workers_give_the_same_batches_in_the_same_order(store, feeds):
    results = {}
    for workers in (0, 1, 3):
        feed = RankFeed(_reader(store), steps=14, transformation=_scaled(2.5), workers=workers)
        feeds.append(feed)
        results[workers] = _epochs(feed)
    assert len(results[0]) == 14 + 14 + 11
    assert results[0][0]["norm"].dtype == np.float32 and results[0][0]["y"].shape == (8, 3)
    _same(results[0], results[1])
    _same(results[0], results[3])
    # The epochs differ (a reshuffle each), and a lambda works too.
    assert results[0][0]["id"].tolist() != results[0][14]["id"].tolist()
    feed = RankFeed(_reader(store), steps=3, workers=2,
                    transformation=Transformation(lambda row: {"id": row["id"] * 3}))
    feeds.append(feed)
    assert [b["id"].tolist() for b in feed.epoch(0)] == [(b["id"] * 3).tolist() for b in
                                                           itertools.islice(_reader(store).batches(0), 3)]


def test_a_batch_transformation_runs_once_a_batch_with_and_without_workers(store, feeds):
    @BatchTransformation
    def vectorised(batch):
        return {"id": batch["id"], "y": batch["x"] * 2.5 + batch["id"][:, None],
                "norm": np.linalg.norm(batch["x"], axis=1)}

    per_row = _epochs(RankFeed(_reader(store), steps=14, transformation=_scaled(2.5)))
    for workers in (0, 2):
        feed = RankFeed(_reader(store), steps=14, workers=workers,
                        transformation=Transformation(vectorised, edit_fields=[("norm", np.float32, (), False)]))
        feeds.append(feed)
        got = _epochs(feed)
        assert len(got) == len(per_row)
        for a, b in zip(got, per_row):
            np.testing.assert_array_equal(a["id"], b["id"])
            np.testing.assert_allclose(a["y"], b["y"])
            assert a["norm"].dtype == np.float32
            np.testing.assert_allclose(a["norm"], b["norm"], rtol=1e-6)


class _Counting:
    """A real reader whose batches are counted as they are read (by the feeder thread)."""

    def __init__(self, reader) -> None:
        self.reader, self.read = reader, 0
        self.rank, self.split = reader.rank, reader.split

    def batches(self, epoch):
        for batch in self.reader.batches(epoch):
            self.read += 1
            yield batch

    def close(self):
        self.reader.close()


def test_batches_in_flight_are_bounded_with_a_slow_consumer(store, feeds):
    reader = _Counting(_reader(store, rows=400, batch_size=4))
    feed = RankFeed(reader, steps=60, transformation=_scaled(1.0), workers=2, batches_per_worker=2)
    feeds.append(feed)
    assert feed.pool.in_flight == 4
    ahead = []
    for consumed, _ in enumerate(feed.epoch(0), start=1):
        time.sleep(0.03)                      # a slow training step
        ahead.append(reader.read - consumed)
    # Never more than the in-flight slots are read ahead of the batch the loop holds, whatever the data
    # size; the feeder does read ahead (the workers are not idle while the loop trains).
    assert max(ahead) <= 4
    assert max(ahead) >= 2
    assert reader.read == 60


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


class _BinaryFiles:
    """Batches as Spark's binaryFile source gives them (path, content): real JPEGs, the 11th corrupt."""

    rank, split, batch_size = 2, "train", 4

    def __init__(self) -> None:
        self.files = [(f"file:/images/img_{i:02d}.jpg", _jpeg(i)) for i in range(16)]
        self.files[10] = ("file:/images/img_10.jpg", b"\xff\xd8 not a jpeg at all")

    def batches(self, epoch):
        for start in itertools.cycle(range(0, 16, 4)):
            rows = self.files[start:start + 4]
            yield {"path": np.array([p for p, _ in rows], dtype=object),
                   "content": np.array([c for _, c in rows] + [None], dtype=object)[:4]}

    def close(self):
        pass


def _decode(row):
    from PIL import Image

    return {"image": np.asarray(Image.open(io.BytesIO(row["content"])).convert("RGB"))}


@pytest.mark.parametrize("workers", [0, 2])
def test_the_users_decode_error_is_re_raised_naming_its_place(feeds, workers):
    from PIL import UnidentifiedImageError

    feed = RankFeed(_BinaryFiles(), steps=4, transformation=Transformation(_decode), workers=workers)
    feeds.append(feed)
    yielded = []
    with pytest.raises(UnidentifiedImageError) as raised:
        for batch in feed.epoch(1):
            yielded.append(batch["image"].shape)
    assert yielded == [(4, 16, 16, 3), (4, 16, 16, 3)]          # the batches before it, in order
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "the train split, epoch 1, batch 2 of the epoch (its rows 8-11), row 10 of the epoch" in notes
    assert "path 'file:/images/img_10.jpg'" in notes
    if workers:
        assert "decode worker" in notes and "rank 2's train feed" in notes
        assert "the decode worker's traceback" in notes and "_decode" in notes
        assert feed.pool.pids == []                              # a failed epoch stops its workers
        # The next epoch starts new workers and fails at the same place.
        with pytest.raises(UnidentifiedImageError):
            list(feed.epoch(2))


class _Picky(Exception):
    def __init__(self, what: str, *, code: int) -> None:     # pickle cannot rebuild it (a keyword argument)
        super().__init__(what)
        self.code = code


def test_an_exception_that_cannot_travel_arrives_as_its_type_and_message(store, feeds):
    def fn(row):
        raise _Picky(f"bad row {int(row['id'])}", code=3)

    feed = RankFeed(_reader(store), steps=2, transformation=Transformation(fn), workers=1)
    feeds.append(feed)
    with pytest.raises(DecodeWorkerError, match=r"_Picky: bad row \d+") as raised:
        list(feed.epoch(0))
    assert "row 0 of the epoch" in "\n".join(raised.value.__notes__)


def _slow(row):
    time.sleep(0.02)
    return {"id": row["id"]}


@pytest.mark.timeout(60)
def test_a_killed_worker_fails_the_feed_naming_the_rank_within_seconds(store, feeds):
    feed = RankFeed(_reader(store, rank=0), steps=30, transformation=Transformation(_slow), workers=2)
    feed.reader.rank, feed.reader.size = 5, 6      # as a rank of a larger fit would name itself
    feeds.append(feed)
    batches = feed.epoch(0)
    next(batches)
    pids = feed.pool.pids
    os.kill(pids[0], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(DecodeWorkerDied, match=r"rank 5: the train feed's decode worker 0 \(pid \d+\) was "
                                               r"killed by SIGKILL"):
        for _ in batches:
            pass
    assert time.monotonic() - start < 10
    assert feed.pool.pids == [] and not any(_alive(pid) for pid in pids)


def test_the_pool_serves_every_epoch_and_close_ends_its_workers(store, feeds):
    feed = RankFeed(_reader(store), steps=5, transformation=_scaled(1.0), workers=2)
    feeds.append(feed)
    assert feed.pool.pids == []                    # started by the first epoch
    list(feed.epoch(0))
    pids = feed.pool.pids
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    list(feed.epoch(1))
    list(feed.epoch(2, skip=4))
    assert feed.pool.pids == pids                  # one pool per feed, not per epoch
    feed.close()
    assert feed.pool.pids == [] and not any(_alive(pid) for pid in pids)


def test_an_epoch_left_before_its_end_stops_its_workers(store, feeds):
    expected = [b["id"].tolist() for b in RankFeed(_reader(store), steps=6, transformation=_scaled(1.0)).epoch(1)]
    feed = RankFeed(_reader(store), steps=6, transformation=_scaled(1.0), workers=2)
    feeds.append(feed)
    batches = feed.epoch(0)
    next(batches), next(batches)
    pids = feed.pool.pids
    batches.close()                                # a failed or resumed epoch's generator, dropped
    assert feed.pool.pids == [] and not any(_alive(pid) for pid in pids)
    assert [b["id"].tolist() for b in feed.epoch(1)] == expected

    # An epoch begun while an earlier one is still open makes the earlier one's batches stale.
    older = feed.epoch(0)
    next(older)
    newer = feed.epoch(1)
    assert [b["id"].tolist() for b in newer] == expected
    with pytest.raises(RuntimeError, match="abandoned: a later epoch of the same feed started"):
        next(older)


def test_workers_import_no_framework_the_transformation_does_not(store, feeds):
    def fn(row):
        loaded = [name for name in ("pyspark", "torch", "tensorflow") if name in sys.modules]
        return {"id": row["id"], "frameworks": np.int64(len(loaded))}

    import torch  # noqa: F401 - the rank has torch; its workers must not

    feed = RankFeed(_reader(store), steps=2, transformation=Transformation(fn), workers=1)
    feeds.append(feed)
    assert all(int(b["frameworks"].max()) == 0 for b in feed.epoch(0))


def test_batches_from_workers_are_writable(store, feeds):
    feed = RankFeed(_reader(store), steps=2, transformation=_scaled(1.0), workers=1)
    feeds.append(feed)
    for batch in feed.epoch(0):
        assert batch["y"].flags.writeable
        batch["y"] += 1


# --- the plan's worker counts --------------------------------------------------------------------------


def test_the_default_worker_count_is_the_ranks_share_of_the_cores_less_one():
    assert default_reader_workers(False, 1, cores=64) == 0          # nothing to decode
    assert default_reader_workers(True, 1, cores=64) == 4           # at most 4
    assert default_reader_workers(True, 4, cores=16) == 3
    assert default_reader_workers(True, 2, cores=4) == 1
    assert default_reader_workers(True, 4, cores=4) == 0            # one core a rank: decode in the loop
    assert 0 <= default_reader_workers(True) <= 4


def _plan(data, **fields) -> FitPlan:
    return FitPlan(data=data, run_id="r", feature_cols=["x"], label_cols=["id"], sample_weight_col=None,
                   batch_size=8, val_batch_size=8, epochs=1, train_steps=3, val_steps=0, shuffle=True,
                   shuffle_buffer_size=None, seed=1, reader="arrow", inmemory_cache_all=False,
                   backward_passes_per_step=1, learning_rate_scaling="none", num_proc=1, **fields)


def test_fit_plan_feeds_take_the_worker_counts(store):
    data = write_split(store, "k", file_rows=[40], row_group_rows=10)
    fn = _scaled(1.0).fn

    def workers(plan, transformation_fn=fn, **kwargs):
        feeds = plan.feeds(0, 1, transformation_fn, **kwargs)
        try:
            return feeds["train"].workers
        finally:
            for feed in feeds.values():
                feed.close()

    assert workers(_plan(data, train_reader_num_workers=3)) == 3
    assert workers(_plan(data, train_reader_num_workers=0)) == 0
    assert workers(_plan(data, train_reader_num_workers=3), transformation_fn=None) == 0
    assert workers(_plan(data, train_reader_num_workers=3), workers={"train": 1}) == 1
    assert workers(_plan(data), ranks_on_host=2) == default_reader_workers(True, 2)
    assert workers(_plan(data), transformation_fn=None) == 0
    with pytest.raises(ValueError, match="train_reader_num_workers must be an integer of 0 or more"):
        workers(_plan(data, train_reader_num_workers=-1))
    # And a plan's feed really decodes in its workers.
    feeds = _plan(data, train_reader_num_workers=2).feeds(0, 1, fn)
    try:
        assert len(list(feeds["train"].epoch(0))) == 3 and len(feeds["train"].pool.pids) == 2
    finally:
        feeds["train"].close()
