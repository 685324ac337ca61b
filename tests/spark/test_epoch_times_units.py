"""Where an epoch's training time goes (spark_hvd/recipe/epoch_clock.py, epoch_times.py), framework-neutral:
the clock's three shares, how the ranks' splits combine, what EpochEvents records and tells the driver, and
the driver's line. Structural checks only: no assertion depends on how fast this machine is."""

from __future__ import annotations

import io
import time

import pytest

from spark_hvd.recipe.epoch_clock import EpochClock, RankTimes
from spark_hvd.recipe.epoch_events import EpochEvents
from spark_hvd.recipe.epoch_times import epoch_times_record, gathered_times, shares
from spark_hvd.recipe.hooks import FrameworkHooks, Records


class _Counter:
    """A stand-in for an optimizer's communication_wait_s."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def _valid(times: RankTimes, wall: float) -> None:
    parts = (times.input_s, times.compute_s, times.communication_s)
    assert all(part >= 0 for part in parts), times
    assert sum(parts) <= wall + 1e-9, (times, wall)


def test_the_three_shares_are_never_negative_and_add_up_to_at_most_the_wall_time() -> None:
    counter = _Counter()
    began = time.perf_counter()
    clock = EpochClock(counter)
    for _ in range(3):
        batch = next(clock.batches(iter([1])))
        assert batch == 1
        counter.seconds += 0.001           # the optimizer reports its allreduce wait
        clock.step_ended()
    times = clock.split()
    _valid(times, time.perf_counter() - began)
    assert times.communication_s == pytest.approx(min(0.003, times.input_s + times.compute_s
                                                      + times.communication_s))


def test_waits_reported_beyond_the_training_time_are_capped_by_it() -> None:
    counter = _Counter()
    clock = EpochClock(counter)
    clock.input_waited(50.0)              # more than the epoch took: a framework's estimate gone wrong
    counter.seconds += 70.0
    clock.input_waited(-1.0)              # a negative wait counts for nothing
    clock.step_ended()
    times = clock.split()
    _valid(times, 1.0)
    assert times.compute_s == 0.0


def test_a_counter_that_raises_counts_as_no_communication() -> None:
    def broken() -> float:
        raise RuntimeError("no optimizer yet")

    clock = EpochClock(broken)
    clock.step_ended()
    assert clock.split().communication_s == 0.0


def test_the_final_stop_of_the_batches_is_not_a_wait_and_begin_starts_afresh() -> None:
    clock = EpochClock()
    assert list(clock.batches([1, 2])) == [1, 2]
    clock.input_waited(5.0)
    clock.begin()
    clock.step_ended()
    assert clock.split().input_s == 0.0


def test_an_excluded_commit_is_no_ones_share() -> None:
    clock = EpochClock()
    time.sleep(0.02)
    clock.exclude(10.0)                   # more than the whole window: nothing is left to share
    clock.step_ended()
    assert clock.split() == RankTimes(0.0, 0.0, 0.0)


def test_the_record_averages_the_ranks_and_names_the_rank_whose_own_work_took_longest() -> None:
    ranks = [RankTimes(1.0, 2.0, 3.0), RankTimes(4.0, 1.0, 1.0), RankTimes(0.5, 0.5, 5.0)]
    record = epoch_times_record(7, ranks)
    assert record == {"epoch": 7, "input_s": pytest.approx(5.5 / 3), "compute_s": pytest.approx(3.5 / 3),
                      "communication_s": pytest.approx(3.0), "slowest_rank": 1, "ranks": 3}
    assert shares(record) == pytest.approx((5.5 / 18, 3.5 / 18, 9 / 18))
    assert shares({"input_s": 0.0, "compute_s": 0.0, "communication_s": 0.0}) is None
    with pytest.raises(ValueError):
        epoch_times_record(0, [])


def test_gathered_times_use_the_frameworks_allgather_in_rank_order() -> None:
    sent = []

    def gather(obj):
        sent.append(obj)
        return [obj, (9.0, 8.0, 7.0)]

    mine = RankTimes(1.0, 2.0, 3.0)
    assert gathered_times(gather, mine) == [mine, RankTimes(9.0, 8.0, 7.0)]
    assert sent == [(1.0, 2.0, 3.0)]
    assert gathered_times(None, mine) == [mine]


class _Plan:
    """4 steps an epoch of 2 ranks of 32 rows: 256 rows."""

    elastic, checkpoint_every_steps, batch_size = None, None, 32
    data = type("Data", (), {"train_rows": 256})()

    def steps_at(self, size: int) -> tuple[int, int]:
        return 4, 0


class _Progress:
    def __init__(self) -> None:
        self.epochs = []

    def step(self, epoch, step, loss) -> None: ...

    def epoch(self, epoch, metrics, times=None) -> None:
        self.epochs.append((epoch, metrics, times))


class _Hooks(FrameworkHooks):
    def __init__(self) -> None:
        self.waited = 0.0

    def init(self): ...
    def restore(self): ...
    def scale_learning_rate(self, factor: float) -> None: ...
    def run_epochs(self, start, events) -> None: ...
    def result(self, records, lr_factor): ...
    def save(self, epoch, records, lr_factor, within=None) -> None: ...

    def communication_wait_s(self) -> float:
        return self.waited


def test_epoch_events_record_the_times_apart_from_the_metrics_and_tell_the_driver() -> None:
    hooks, progress = _Hooks(), _Progress()
    gathered = []

    def gather(obj, name="shvd.epoch_times"):
        gathered.append(name)
        return [obj, obj]                 # two ranks that did the same

    began = time.perf_counter()
    events = EpochEvents(hooks, _Plan(), progress, 2, Records(), 1, gather=gather)
    for epoch in range(2):
        events.epoch_begins(epoch)
        for step, _ in enumerate(events.input_batches(range(4)), start=1):
            hooks.waited += 0.0001
            events.step_done(epoch, step, 0.5)
        events.epoch_done(epoch, {"epoch": epoch}, {"loss": 0.5})
    wall = time.perf_counter() - began
    records = events.records
    assert records.epoch_metrics == [{"epoch": 0, "loss": 0.5}, {"epoch": 1, "loss": 0.5}]
    assert [entry["epoch"] for entry in records.epoch_times] == [0, 1]
    # One gather of the times an epoch, one of the generators for its checkpoint, none a step.
    assert gathered == ["shvd.epoch_times", "shvd.rng_states"] * 2
    for entry in records.epoch_times:
        assert entry["ranks"] == 2 and entry["slowest_rank"] in (0, 1)
        _valid(RankTimes(entry["input_s"], entry["compute_s"], entry["communication_s"]), wall)
    assert [times for _, _, times in progress.epochs] == records.epoch_times


def test_the_driver_shows_the_split_under_each_epochs_line() -> None:
    from spark_hvd.estimator.progress import FitProgress, _Display

    out = io.StringIO()
    progress = FitProgress(epochs=2, steps_per_epoch=4, display=_Display(stream=out, notebook=False))
    progress.on_event(0, {"type": "start", "first_epoch": 0})
    times = {"epoch": 0, "input_s": 1.2, "compute_s": 7.0, "communication_s": 1.8, "slowest_rank": 1, "ranks": 2}
    progress.on_event(0, {"type": "epoch", "epoch": 0, "metrics": {"loss": 0.5}, "times": times})
    progress.on_event(0, {"type": "epoch", "epoch": 1, "metrics": {"loss": 0.25}})   # an older rank: no times
    lines = out.getvalue().splitlines()
    assert "  input 12%, compute 70%, comm 18% (slowest: rank 1)" in lines
    assert len([line for line in lines if line.startswith("  input ")]) == 1
    assert progress.epoch_times == [times]
    assert progress.history == [{"epoch": 0, "loss": 0.5}, {"epoch": 1, "loss": 0.25}]
