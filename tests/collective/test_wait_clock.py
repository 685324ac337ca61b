"""collective.api.wait_clock.WaitClock: the wait-time counter the distributed optimizers expose."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest

from collective.api.wait_clock import WaitClock


def test_it_sums_the_blocks_it_times_and_what_is_added_from_any_thread() -> None:
    clock = WaitClock()
    assert clock.seconds == 0.0
    with clock.timing():
        pass
    timed = clock.seconds
    assert timed >= 0.0
    threads = [threading.Thread(target=lambda: [clock.add(0.001) for _ in range(100)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.seconds == pytest.approx(timed + 0.4)
    clock.add(-5.0)                      # a negative wait counts for nothing
    assert clock.seconds == pytest.approx(timed + 0.4)


def test_a_block_that_raises_still_counts_and_the_clock_copies_and_pickles() -> None:
    clock = WaitClock()
    with pytest.raises(RuntimeError):
        with clock.timing():
            clock.add(1.0)
            raise RuntimeError("the allreduce failed")
    assert clock.seconds >= 1.0
    for other in (copy.deepcopy(clock), pickle.loads(pickle.dumps(clock))):
        assert other.seconds == clock.seconds
        other.add(1.0)                   # with a lock of its own
        assert other.seconds == clock.seconds + 1.0
