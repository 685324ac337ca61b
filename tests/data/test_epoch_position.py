"""An epoch's order and positions (no files): dealing to any number of ranks trains every row once."""

from __future__ import annotations

import itertools

import pytest

from spark_hvd.data.read.epoch_order import EpochOrder, Gather, Run
from spark_hvd.data.read.epoch_position import EpochPosition, epoch_origin, merged, take_positions


def positions(intervals) -> list[int]:
    return [p for start, stop in intervals for p in range(start, stop)]


def test_take_and_merge_intervals() -> None:
    assert take_positions([(0, 3), (5, 9)], 5) == (((0, 3), (5, 7)), ((7, 9),))
    assert take_positions([(0, 3)], 0) == ((), ((0, 3),))
    assert merged([(5, 7), (0, 2), (2, 3), (4, 4), (6, 9)]) == ((0, 3), (5, 9))


@pytest.mark.parametrize("rows, size, steps, batch", [(100, 2, 2, 32), (100, 3, 1, 32), (512, 2, 8, 32),
                                                      (520, 2, 8, 32), (3, 4, 1, 2), (7, 1, 7, 1)])
def test_a_fresh_deal_gives_each_rank_a_contiguous_share_of_whole_batches(rows, size, steps, batch) -> None:
    deal = EpochPosition.fresh(0, rows).deal(size, steps, batch)
    dealt = [positions(deal.share(rank)) for rank in range(size)]
    assert all(len(share) == steps * batch for share in dealt)
    flat = [p for share in dealt for p in share]
    assert flat == list(range(len(flat)))                 # in order, rank after rank
    padding = sum(deal.padding(rank) for rank in range(size))
    assert padding == max(0, size * steps * batch - rows) == sum(p >= rows for p in flat)
    assert positions(deal.rest) == list(range(len(flat), rows))   # what whole batches leave out


def _trained(rows: int, formations: list[tuple[int, int, int]], batch: int) -> list[int]:
    """Positions trained by formations of (size, steps dealt, steps run) in turn, each resuming the last."""
    position, trained = EpochPosition.fresh(0, rows), []
    for size, steps, run in formations:
        deal = position.deal(size, steps, batch)
        trained += [p for rank in range(size) for p in positions(take_positions(deal.share(rank), run * batch)[0])]
        position = deal.after(run)
    return trained


@pytest.mark.parametrize("rows, batch", [(97, 4), (512, 32), (1000, 7)])
def test_a_reformed_epoch_trains_every_row_once(rows, batch) -> None:
    import math

    for sizes in [(3, 2), (2, 3), (4, 1, 3), (1, 5)]:
        formations, position = [], EpochPosition.fresh(0, rows)
        for index, size in enumerate(sizes):
            steps = max(1, math.ceil(position.pass_rows_left / (size * batch)))
            run = steps if index == len(sizes) - 1 else steps // 2
            formations.append((size, steps, run))
            position = position.deal(size, steps, batch).after(run)
        trained = _trained(rows, formations, batch)
        real = sorted(p for p in trained if p < rows)
        assert real == list(range(rows)), sizes                        # each row of the pass once
        assert len(trained) - len(real) < sizes[-1] * batch * 2         # the padding is the last steps'


@pytest.mark.parametrize("rows, size, steps, batch", [(100, 2, 2, 32), (385, 4, 4, 32), (520, 2, 8, 32),
                                                      (257, 2, 5, 32)])
def test_resuming_at_the_same_size_deals_the_very_same_rest(rows, size, steps, batch) -> None:
    deal = EpochPosition.fresh(1, rows).deal(size, steps, batch)
    for done in range(steps + 1):
        again = deal.after(done).deal(size, steps - done, batch)
        for rank in range(size):
            assert positions(again.share(rank)) == positions(take_positions(deal.share(rank), done * batch)[1])


def test_positions_are_a_few_integers() -> None:
    position = EpochPosition.fresh(3, 10**9).deal(7, 1000, 64).after(123)
    ints = position.to_ints()
    # One stretch per rank (the last touches what whole batches leave out).
    assert len(ints) == 3 + 2 * 7 and EpochPosition.from_ints(ints) == position
    assert position.rows_left == 10**9 - 7 * 123 * 64
    with pytest.raises(ValueError, match="pairs"):
        EpochPosition.from_ints([0, 1, 2, 3])


def test_epoch_origin_is_the_resumed_position_for_its_epoch_only() -> None:
    resumed = EpochPosition.fresh(2, 100).deal(3, 2, 10).after(1)
    assert epoch_origin(resumed, 2, 100, 2, 3, 10, skip=1) is resumed
    assert epoch_origin(resumed, 3, 100, 2, 3, 10) == EpochPosition.fresh(3, 100)
    assert epoch_origin(None, 0, 100, 2, 3, 10, skip=1) == EpochPosition.fresh(0, 100).deal(2, 3, 10).after(1)


def _rows_at(order: EpochOrder, epoch: int, start: int, stop: int) -> list[int]:
    out = []
    for stretch in order.stretches(epoch, start, stop):
        if isinstance(stretch, Run):
            out += list(range(stretch.start, stretch.stop))
        else:
            assert isinstance(stretch, Gather)
            out += stretch.rows.tolist()
    return out


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_epochs_order_is_a_pass_over_every_row_and_the_same_however_it_is_cut(shuffle) -> None:
    order = EpochOrder(36, shuffle, seed=4, window_rows=10)
    every = list(range(36))
    whole = _rows_at(order, 5, 0, 36)
    assert sorted(whole) == every
    assert (whole == every) != shuffle
    for cut in (1, 9, 10, 17, 35):
        assert _rows_at(order, 5, 0, cut) + _rows_at(order, 5, cut, 36) == whole
    # Positions past the pass are the next pass's rows: a pass of its own order.
    second = _rows_at(order, 5, 36, 72)
    assert sorted(second) == every and (second != whole) == shuffle
    assert _rows_at(order, 5, 30, 40) == whole[30:] + second[:4]


def test_the_shuffled_order_depends_on_the_seed_and_the_epoch_and_mixes_the_split() -> None:
    order = EpochOrder(100, True, seed=4, window_rows=30)
    first = _rows_at(order, 0, 0, 100)
    assert _rows_at(EpochOrder(100, True, seed=4, window_rows=30), 0, 0, 100) == first
    assert _rows_at(order, 1, 0, 100) != first
    assert _rows_at(EpochOrder(100, True, seed=5, window_rows=30), 0, 0, 100) != first
    # A window's rows come from blocks anywhere in the split.
    assert any(max(first[b:b + 30]) - min(first[b:b + 30]) > 50 for b in range(0, 90, 30))
    # Unseeded, every rank must still draw the same order.
    assert _rows_at(EpochOrder(100, True, None, 30), 0, 0, 100) == _rows_at(EpochOrder(100, True, 0, 30), 0, 0, 100)


def test_every_cut_of_many_reads_the_same_rows() -> None:
    order = EpochOrder(23, True, seed=1, window_rows=6)
    whole = _rows_at(order, 0, 0, 23)
    for a, b in itertools.combinations(range(24), 2):
        assert _rows_at(order, 0, a, b) == whole[a:b]
    assert sorted(whole) == list(range(23))


def test_a_deal_of_no_steps_gives_every_rank_nothing_and_leaves_everything() -> None:
    deal = EpochPosition.fresh(0, 50).deal(3, 0, 8)
    assert deal.shares == ((), (), ()) and deal.after(0) == EpochPosition.fresh(0, 50)
