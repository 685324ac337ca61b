"""The one handle type (``Work``) on every route, in one process on the CPU: the engine route, the
host-staged route (driven with CPU tensors, as on a process set), the stream route (a stand-in for a
CUDA event) and composed handles. ``hvd.poll`` and ``hvd.synchronize`` never ask which route ran."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch

import collective.torch as hvd
from collective.torch.routes import handles, staged
from collective.torch.routes.handles import Work, chained_work, engine_work, event_work


class _Event:
    """What the stream route asks of a ``torch.cuda.Event``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.done = False
        self.error = error

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True
        if self.error is not None:
            raise self.error


class _FailingEngine:
    """An engine whose request failed (as a stalled or mismatched one does)."""

    def poll(self, _request: int) -> bool:
        return True

    def wait(self, _request: int, _code: int) -> Any:
        raise hvd.HorovodInternalError("rank 1 never submitted 'grad.w'")


@pytest.fixture(scope="module", autouse=True)
def _job() -> Iterator[None]:
    hvd.init()
    yield
    hvd.shutdown()


def test_every_route_returns_a_work_with_one_id_space() -> None:
    engine = hvd.allreduce_async(torch.ones(3), name="h.engine")
    host = staged.allreduce_(torch.ones(3), "h.staged", hvd.Sum, 1.0, 1.0, hvd.global_process_set)
    stream = event_work(_Event(), lambda _done: "streamed", ())
    sparse = hvd.sparse_allreduce_async(torch.ones(2, 2).to_sparse(), name="h.sparse", op=hvd.Sum)
    works = [engine, host, stream, sparse]
    assert all(type(w) is Work and isinstance(w, int) for w in works)
    assert len({int(w) for w in works}) == len(works)  # one counter, whatever the route
    for work in works:
        hvd.synchronize(work)


def test_poll_and_synchronize_on_each_route() -> None:
    event = _Event()
    stream = event_work(event, lambda _done: "streamed", ())
    assert hvd.poll(stream) is False
    event.done = True
    assert hvd.poll(stream) is True and hvd.synchronize(stream) == "streamed"

    engine = hvd.allreduce_async_(torch.full((4,), 2.0), name="h.poll", op=hvd.Sum)
    assert torch.equal(hvd.synchronize(engine), torch.full((4,), 2.0))

    target = torch.arange(6, dtype=torch.float64).view(2, 3).t()  # non-contiguous: staged copies back
    host = staged.allreduce_(target, "h.staged.poll", hvd.Sum, 1.0, 1.0, hvd.global_process_set)
    assert hvd.synchronize(host) is target
    assert torch.equal(target, torch.arange(6, dtype=torch.float64).view(2, 3).t())

    grouped = hvd.grouped_allreduce_async([torch.ones(2), torch.zeros(3)], name="h.group")
    assert [t.tolist() for t in grouped.wait()] == [[1.0, 1.0], [0.0, 0.0, 0.0]]  # c10d's name works too

    for work in (stream, engine, host, grouped):  # finished: as Horovod's, synchronize gives None, poll raises
        assert hvd.synchronize(work) is None
        with pytest.raises(hvd.InvalidArgumentError, match="unknown handle"):
            hvd.poll(work)


def test_an_error_surfaces_through_synchronize_on_each_route() -> None:
    failed = engine_work(_FailingEngine(), [(7, 0)], lambda results: results, ())
    with pytest.raises(hvd.HorovodInternalError, match="rank 1 never submitted"):
        hvd.synchronize(failed)

    broken = event_work(_Event(RuntimeError("CUDA error: an illegal memory access")), lambda _done: None, ())
    with pytest.raises(RuntimeError, match="illegal memory access"):
        hvd.synchronize(broken)

    # A composed handle waits for every part before it raises the first error: until each part is
    # done, its route may still use the memory behind it.
    later = event_work(_Event(), lambda _done: "later", ())
    chained = chained_work([engine_work(_FailingEngine(), [(8, 0)], lambda r: r, ()), later], list)
    with pytest.raises(hvd.HorovodInternalError, match="rank 1 never submitted"):
        hvd.synchronize(chained)
    assert hvd.synchronize(later) is None  # waited for, and gone from the registry
    assert hvd.synchronize(failed) is None and hvd.synchronize(chained) is None


def test_shutdown_drops_every_route() -> None:
    pending = [event_work(_Event(), lambda _done: None, ()), hvd.allreduce_async(torch.ones(1), name="h.drop")]
    hvd.synchronize(pending[1])  # the engine must not be left with a request in flight
    handles.forget_all()
    with pytest.raises(hvd.InvalidArgumentError, match="unknown handle"):
        hvd.poll(pending[0])
