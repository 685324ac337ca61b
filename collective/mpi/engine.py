"""The background engine for the MPI backend: ``collective.engine.Engine``'s interface over mpi4py.

Work happens in cycles, collective on every rank: each announces the requests submitted since its
last cycle (an Iallgather of a 5-int header; the pickled calls follow only when some rank has a
batch not seen before, so a repeated step costs that one tiny exchange: unnamed calls are cached by
their position, not their numbered names), then every rank runs, in the same order, the requests
all ranks have submitted. When every rank announced the same cached batch and nothing older waits
(a training step repeating itself), that batch runs as it stands, without the per-name bookkeeping.
Small allreduces that agree on dtype, op and scaling are fused. Rank 0 writes the ring engine's timeline
(collective.mpi.tracing) when asked. A request that some ranks never submit fails on every rank after
``stall_shutdown_s``: ranks have no common clock, but they count rounds alike, so each header names the
latest round whose stalled requests its own clock says to fail, and all ranks fail the same ones.

Cycles run under one lock, by whichever thread needs them: a caller that waits on its request runs
them itself (no hand-off to another thread and back, the main cost of a small collective here), and
the background thread runs them for requests nobody waits on yet, and an idle one every cycle time,
as peers may need this rank to take part. MPI is polled (Test) while a round is open, so a peer whose
engine stopped is a timeout, not a hang.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from collective._native import CollectiveKind, DType, ReduceOp, joined_refusal
from collective.auto_names import AutoNames, auto_name
from collective.config import Config
from collective.errors import CollectiveError, CollectiveTimeoutError, InvalidArgumentError, MismatchError, \
    PeerFailureError
from collective.mpi import transfers
from collective.mpi.buffers import ITEMSIZE, STORAGE, tensor_array
from collective.mpi.calls import Call, check_agreement, kind_name, validate_call
from collective.mpi.features import check_supported
from collective.mpi.negotiation import Table
from collective.mpi.tracing import MEMCPY_IN, MEMCPY_OUT, QUEUE, EngineTimeline, negotiate_phase_of, now_ns, phase_of
from collective.reduce_ops import scale_factors

logger = logging.getLogger(__name__)

_NOTHING, _CACHED, _FRESH = 0, 1, 2   # what a rank's header says about its announcement
# Header fields: what the rank announces, its cache number or pickle's length, whether it stops, the batch's
# first unnamed number, and the latest round whose stalled requests it wants to fail (-1: none).
_KIND, _VALUE, _STOPPING, _BASE, _EXPIRE = range(5)
_SPIN_S = 20e-6                       # busy polling first: a peer already on its way arrives within this
_YIELD_S = 2e-3                       # then yield the CPU between polls (a peer may need the core we hold)
_LONGEST_PAUSE_S = 200e-6             # then sleeps of at most this, so a late peer costs little extra
_STALLED_AFTER_CYCLES = 10            # quiet rounds for this many cycle times: a waiting caller slows down
_LARGEST_FUSED_BYTES = 1 << 20        # bigger tensors reduce in place, as the native engine does


@dataclass
class _Request:
    handle: int
    call: Call
    data: np.ndarray | None
    # What is announced: the call's fields, with an unnamed call's number in place of its name.
    fields: tuple
    enqueued_ns: int = 0  # when it was submitted, while a timeline runs
    done: bool = False  # set last, by the thread that ran the cycle; see MpiEngine._drive
    result: Any = None
    error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done = True


class MpiEngine:
    def __init__(self, comm: Any, config: Config) -> None:
        """``comm`` is the runtime's MpiCommunicator; the engine works on the duplicate it reserved."""
        check_supported(config)  # before anything starts: a native-only feature is refused by name
        self._comm = comm.engine_comm
        self._rank, self._size = int(self._comm.Get_rank()), int(self._comm.Get_size())
        from mpi4py import MPI

        self._byte = MPI.BYTE
        self._header = np.empty(5, np.int64)
        self._headers = np.empty((self._size, 5), np.int64)
        self._fusion_bytes = config.fusion_threshold_bytes
        self._cycle_s = config.cycle_time_ms / 1000.0
        self._timeout_s = config.timeout_s
        self._stall_check_s = config.stall_check_s
        self._stall_shutdown_s = config.stall_shutdown_s
        self._round = 0  # rounds so far: the same count on every rank, as each round is collective
        self._cache_capacity = config.cache_capacity
        # One lock guards the engine's state; plain ``with self._lock`` where nobody is woken, as a
        # Condition's own enter/exit run in Python and a small collective takes the lock several times.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)      # wakes the background thread (submits do not)
        self._progress = threading.Condition(self._lock)  # wakes callers waiting for another thread's cycle
        self._pacing = 0                            # callers waiting on _progress
        self._waiters = 0                           # callers in wait(), driving cycles
        self._cycle_lock = threading.Lock()         # cycles are collective: one at a time, whoever runs them
        self._eager = False  # whether the running cycle has a caller waiting (see _await)
        self._last_cycle = self._last_news = time.monotonic()  # last round; last one where a rank announced
        self._queue: list[_Request] = []            # submitted, not announced yet
        self._in_flight: dict[str, _Request] = {}   # by name, until it ran
        self._joins: list[_Request] = []
        self._handles: dict[int, _Request] = {}
        self._next_handle = itertools.count(1)
        self._names = AutoNames()
        self._stopping = False
        self._broken: BaseException | None = None
        self._table = Table(self._size)
        self._cache_ids: dict[tuple, int] = {}      # announced batch (fields) -> cache number
        self._cached_batches: list[tuple] = []
        self._named_calls: dict[tuple, list[Call]] = {}  # decoded batches without unnamed calls
        self._call_number = 0
        self._templates: dict[tuple, Call] = {}
        self._warned: set[str] = set()
        self._timeline = EngineTimeline(self._rank, config.timeline)
        self._negotiated_ns = 0  # when the running cycle found its requests ready (timeline only)
        self._thread = threading.Thread(target=self._run, name="collective-mpi-engine", daemon=True)
        self._thread.start()

    # ---- the interface of collective.engine.Engine -------------------------------------------

    def submit(self, kind: CollectiveKind, name: str | None, tensor: Any, dtype: DType | None = None,
               shape: Sequence[int] | None = None, op: ReduceOp = ReduceOp.SUM, root: int = -1,
               prescale: float = 1.0, postscale: float = 1.0, splits: Sequence[int] = (), group: int = -1,
               group_size: int = 0, source: Any = None) -> int:
        """Enqueues a request (see Engine.submit). Groups need no special handling: members fuse anyway.
        An allreduce's separate ``source`` is copied into ``tensor`` here (MPI reduces in place).

        The background thread is not woken: it picks the request up within a cycle time (gathering
        what else is submitted meanwhile, for fusion), or the caller's wait runs the cycle at once."""
        prescale, postscale = scale_factors(prescale, postscale)
        data, code, dims = tensor_array(tensor, dtype, shape) if tensor is not None else (None, -1, ())
        if source is not None:
            self._copy_source(kind, name, data, code, dims, source)
        template = self._template(kind, name or None, code, dims, op, root, prescale, postscale, splits)
        if name:
            return self._enqueue(template, tuple(template), data)
        with self._names.next_number() as number:  # used up only if the request is accepted
            return self._enqueue(Call(kind, _auto_name(kind, number), *template[2:]), (kind, number, *template[2:]),
                                 data)

    @staticmethod
    def _copy_source(kind: CollectiveKind, name: str | None, data: Any, code: Any, dims: Sequence[int],
                     source: Any) -> None:
        label = repr(name) if name else "(unnamed)"
        if kind != CollectiveKind.ALLREDUCE or data is None:
            raise InvalidArgumentError(f"a separate input tensor is for allreduce only, not {kind.name.lower()} {label}")
        # An address (torch) has the output's dtype and shape; a buffer says its own.
        values = tensor_array(source, code, dims)[0] if isinstance(source, int) else np.asarray(source)
        if values.dtype != data.dtype or values.size != data.size:
            raise InvalidArgumentError(f"the input of {label} is {values.size} {values.dtype} elements, its output "
                                       f"{data.size} {data.dtype}")
        np.copyto(data, values.reshape(-1))

    def _enqueue(self, call: Call, fields: tuple, data: Any) -> int:
        kind, name = call.kind, call.name
        with self._lock:
            if self._broken is not None:
                raise CollectiveError(f"the MPI engine has stopped: {self._broken}")
            if self._stopping:
                raise CollectiveError("the MPI engine is shutting down")
            if kind != CollectiveKind.JOIN and name in self._in_flight:
                raise InvalidArgumentError(f"{call.kind_name} '{name}' is already in flight on this rank; "
                                           "names must be unique among outstanding requests")
            request = _Request(next(self._next_handle), call, data, fields, now_ns() if self._timeline.on else 0)
            self._handles[request.handle] = request
            self._queue.append(request)
            if kind == CollectiveKind.JOIN:
                self._joins.append(request)
            else:
                self._in_flight[name] = request
        return request.handle

    def _template(self, kind: int, name: str | None, code: int, dims: tuple, op: int, root: int, prescale: float,
                  postscale: float, splits: Sequence[int]) -> Call:
        """The validated call (name "" when unnamed), remembered: training submits the same ones each step."""
        key = (kind, name, code, dims, op, root, prescale, postscale, tuple(splits))
        call = self._templates.get(key)
        if call is None:
            if code < 0:  # no tensor (join, barrier)
                call = Call(kind, name or "")
            else:
                call = Call(kind, name or "", code, dims, int(op), int(root), float(prescale), float(postscale),
                            tuple(map(int, splits)))
            call = validate_call(call, self._size)
            if len(self._templates) >= self._cache_capacity:
                self._templates.clear()
            self._templates[key] = call
        return call

    def run(self, kind: CollectiveKind, name: str | None, tensor: Any, dtype: DType | None = None,
            shape: Sequence[int] | None = None, op: ReduceOp = ReduceOp.SUM, root: int = -1, prescale: float = 1.0,
            postscale: float = 1.0, splits: Sequence[int] = ()) -> Any:
        """Submits one request and waits for it, as ``collective.engine.Engine.run``."""
        return self.wait(self.submit(kind, name, tensor, dtype, shape, op, root, prescale, postscale, splits))

    def join(self) -> int:
        """As ``collective.engine.Engine.join``."""
        last = int(self.wait(self.submit(CollectiveKind.JOIN, "join", None)))
        self._names.start_series()
        return last

    def poll(self, handle: int) -> bool:
        return self._request(handle).done

    def wait(self, handle: int, dtype: DType = DType.uint8) -> Any:
        """Runs cycles in this thread until the request is done (or waits while another thread runs one)."""
        request = self._request(handle)
        deadline = time.monotonic() + self._timeout_s * 4
        with self._lock:
            self._waiters += 1
        try:
            self._drive(request, deadline)
        finally:
            with self._lock:
                self._waiters -= 1
                if request.done:
                    self._handles.pop(handle, None)
        if request.error is not None:
            raise request.error
        return request.result

    def _drive(self, request: _Request, deadline: float) -> None:
        while not request.done:
            left = deadline - time.monotonic()
            if left <= 0:
                self._raise_timeout(request)
            if not (self._cycle_lock.acquire(blocking=False) or self._cycle_lock.acquire(timeout=left)):
                continue
            try:
                quiet = not request.done and not self._cycle(eager=True)
            finally:
                self._cycle_lock.release()
            if quiet and time.monotonic() - self._last_news >= _STALLED_AFTER_CYCLES * self._cycle_s:
                # No rank has announced anything for a while: a stall, not a late peer (those announce
                # soon, and each round already waits for them). Go on at the idle pace, not round after
                # round at full speed (another thread's cycle may finish it meanwhile).
                with self._progress:
                    if not request.done:
                        self._pacing += 1
                        self._progress.wait(min(self._cycle_s, max(deadline - time.monotonic(), 0.0)))
                        self._pacing -= 1

    def start_timeline(self, path: str, mark_cycles: bool) -> None:
        """As ``collective.engine.Engine.start_timeline``: rank 0 writes, in the native engine's format."""
        self._timeline.start(path, mark_cycles)

    def stop_timeline(self) -> None:
        self._timeline.stop()

    def shutdown(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(self._timeout_s)
        self._timeline.stop()

    # ---- cycles ----------------------------------------------------------------------------------

    def _request(self, handle: int) -> _Request:
        request = self._handles.get(handle)
        if request is None:
            raise InvalidArgumentError(f"unknown engine handle {handle}")
        return request

    def _raise_timeout(self, request: _Request) -> None:
        with self._cond:
            try:
                missing = self._table.missing(request.call.name)
            except RuntimeError:  # a cycle changed the table meanwhile
                missing = []
        who = f"rank(s) {missing} have not submitted it" if missing else "every rank has submitted it"
        raise CollectiveTimeoutError(
            f"{request.call.kind_name} '{request.call.name}' did not complete within {self._timeout_s * 4:g}s; {who}")

    def _run(self) -> None:
        """The background thread: a cycle whenever requests wait that no caller is driving, and an idle
        one every cycle time."""
        while self._broken is None:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(self._cycle_s)
                stopping = self._stopping
                # Requests somebody waits on are that caller's to drive.
                undriven = not self._waiters and bool(self._queue or self._in_flight or self._joins)
            if not (stopping or undriven or time.monotonic() - self._last_cycle >= self._cycle_s):
                continue
            # Never queue behind a caller's cycles (that cycle serves the peers too), except to stop.
            if self._cycle_lock.acquire(blocking=stopping):
                try:
                    self._cycle(eager=False)
                finally:
                    self._cycle_lock.release()

    def _cycle(self, eager: bool) -> bool:
        """One collective round (the caller holds the cycle lock); whether any rank announced anything.
        ``eager`` when a caller waits on it: MPI is then polled without sleeping for a while. On failure
        every request fails."""
        if self._broken is not None:
            return True
        self._eager = eager
        try:
            with self._lock:
                announced, self._queue = self._queue, []
                stopping = self._stopping
            rows, payload = self._swap_headers([r.fields for r in announced], stopping)
            self._round += 1
            self._last_cycle = time.monotonic()
            stopped = [r for r, row in enumerate(rows) if row[_STOPPING]]
            if self._same_cached_batch(rows, announced):
                # Every rank announced the same remembered batch and nothing older waits: the batch is
                # ready as it stands, in its order, and the ranks' calls agree (the steady state).
                self._run_ready([(r.call.name, None) for r in announced])
                anything = True
            else:
                gathered = self._gather_batches(rows, payload)
                for rank, calls in enumerate(gathered):
                    self._table.announce(rank, calls, self._round)
                joined = sorted(self._table.joined)
                self._run_ready(self._table.take_ready(), joined)
                self._fail_stalled(max(row[_EXPIRE] for row in rows))
                anything = any(gathered)
            if anything:
                self._last_news = self._last_cycle
            self._finish_join()
            with self._lock:
                if self._pacing:
                    self._progress.notify_all()
            self._warn_stalls()
            if stopped:
                # Once one rank leaves, no further round can complete: later submits fail at once.
                self._break(CollectiveError("the MPI engine was shut down") if stopping else PeerFailureError(
                    f"rank(s) {stopped} shut down their engine; no more collectives can run"))
            return anything
        except BaseException as e:  # noqa: BLE001 - every waiter must hear about it
            logger.exception("MPI engine failed")
            self._break(e if isinstance(e, CollectiveError) else
                        CollectiveError(f"the MPI engine failed: {type(e).__name__}: {e}"))
            return True

    def _break(self, error: BaseException) -> None:
        with self._cond:
            self._broken = error
            self._cond.notify()
        self._fail_all(error)
        with self._progress:
            self._progress.notify_all()

    def _swap_headers(self, batch: list[tuple], stopping: bool) -> tuple[list[list[int]], bytes]:
        """Every rank's header (what it announces, whether it stops, its first unnamed number), and this
        rank's pickled batch (empty unless fresh). ``batch`` holds the announced fields;
        unnamed calls travel as their number minus the batch's first, so a step that repeats the same
        unnamed calls is a cache hit."""
        base = next((f[1] for f in batch if type(f[1]) is int), 0)
        key = tuple(f if type(f[1]) is str else (f[0], f[1] - base, *f[2:]) for f in batch)
        cached = self._cache_ids.get(key) if batch else None
        kind = _NOTHING if not batch else (_CACHED if cached is not None else _FRESH)
        payload = pickle.dumps(key) if kind == _FRESH else b""
        header, headers = self._header, self._headers  # reused: only the cycle lock's holder touches them
        expire = self._table.stalled_since(self._stall_shutdown_s, time.monotonic()) if self._table.pending else -1
        header[:] = (kind, cached if cached is not None else len(payload), int(stopping), base, expire)
        self._await(self._comm.Iallgather(header, headers))
        return headers.tolist(), payload

    def _same_cached_batch(self, rows: list[list[int]], announced: list[_Request]) -> bool:
        return (rows[0][_KIND] == _CACHED and rows.count(rows[0]) == self._size and not self._table.pending
                and not self._table.joined and all(r.call.kind != CollectiveKind.JOIN for r in announced))

    def _gather_batches(self, rows: list[list[int]], payload: bytes) -> list[list[Call]]:
        """Every rank's new calls, in rank order: remembered batches from the cache, fresh ones through
        one Allgatherv of their pickles."""
        fresh_counts = [row[_VALUE] if row[_KIND] == _FRESH else 0 for row in rows]
        blob = b""
        if any(fresh_counts):
            received = np.empty(sum(fresh_counts), np.uint8)
            send = np.frombuffer(payload, np.uint8)
            displs = list(itertools.accumulate(fresh_counts[:-1], initial=0))
            self._await(self._comm.Iallgatherv([send, self._byte], [received, fresh_counts, displs, self._byte]))
            blob = received.tobytes()
        gathered: list[list[Call]] = []
        offset = 0
        for (what, value, _, their_base, _), count in zip(rows, fresh_counts):
            if what == _NOTHING:
                gathered.append([])
                continue
            if what == _CACHED:
                their_key = self._cached_batches[value]
            else:
                their_key = pickle.loads(blob[offset:offset + count])  # from our own job's ranks only
                offset += count
                # Every rank inserts the same batches in the same order, so cache numbers agree.
                if their_key not in self._cache_ids and len(self._cached_batches) < self._cache_capacity:
                    self._cache_ids[their_key] = len(self._cached_batches)
                    self._cached_batches.append(their_key)
            gathered.append(self._decode(their_key, their_base))
        return gathered

    def _decode(self, key: tuple, base: int) -> list[Call]:
        named = self._named_calls.get(key)
        if named is not None:
            return named
        calls = [Call(f[0], f[1] if type(f[1]) is str else _auto_name(f[0], base + f[1]), *f[2:]) for f in key]
        if all(type(f[1]) is str for f in key) and len(self._named_calls) < self._cache_capacity:
            self._named_calls[key] = calls
        return calls

    def _await(self, request: Any) -> None:
        """Polls ``request``; a peer whose engine stopped cycling is an error after ``timeout_s``, not a hang
        (MPI cannot say which peer; a dead process makes mpiexec end the job sooner)."""
        if request.Test():
            return
        started = time.monotonic()
        pause = 20e-6
        while not request.Test():
            waited = time.monotonic() - started
            if waited < _SPIN_S:
                continue
            if waited < _YIELD_S and self._eager:
                # A caller waits: stay responsive, but let a peer that shares our core run. The
                # background thread's rounds (idle ticks, requests nobody waits on yet) go straight to
                # sleeping instead, so they never compete with the program's own threads for long.
                os.sched_yield()
                continue
            if waited > self._timeout_s:
                raise CollectiveTimeoutError(
                    f"rank {self._rank}: the MPI engine's negotiation round did not complete within "
                    f"{self._timeout_s:g}s; a peer's engine has stopped or hangs")
            time.sleep(pause)  # a long wait (an idle peer ticks once per cycle time): stop using the CPU
            pause = min(pause * 2, _LONGEST_PAUSE_S)

    def _run_ready(self, ready: list[tuple[str, dict[int, Call] | None]], joined: Sequence[int] = ()) -> None:
        """Runs ``ready`` in order: (name, every rank's call), or (name, None) for one of this rank's own
        requests that every rank made identically. While ranks have ``joined``, only allreduces run; the
        rest fail as the native coordinator fails them (the tables, so the refusals, are alike on every rank)."""
        fused: list[tuple[_Request | None, Call]] = []
        timeline = self._timeline if self._timeline.on and ready else None
        self._negotiated_ns = now_ns() if timeline is not None else 0
        if timeline is not None:
            timeline.cycle_start()
        for name, by_rank in ready:
            mine = self._negotiated(name, timeline)
            number = self._call_number
            self._call_number += 1
            base = self._agreed_call(name, mine, by_rank, joined, number)
            if base is None:
                continue
            if self._fusible(base) and (not fused or self._fits(fused, base)):
                fused.append((mine, base))
                continue
            self._run_fused(fused)
            fused = [(mine, base)] if self._fusible(base) else []
            if not fused:
                self._run_one(mine, base, by_rank)
        self._run_fused(fused)

    def _negotiated(self, name: str, timeline: Any) -> _Request | None:
        """This rank's request called ``name`` (None: it has none, or it failed meanwhile), its
        negotiation marked on the timeline."""
        with self._lock:
            mine = self._in_flight.pop(name, None)
        if timeline is not None and mine is not None and mine.enqueued_ns:
            timeline.phase(name, negotiate_phase_of(mine.call.kind), mine.enqueued_ns, self._negotiated_ns)
        return mine

    def _agreed_call(self, name: str, mine: _Request | None, by_rank: dict[int, Call] | None,
                     joined: Sequence[int], number: int) -> Call | None:
        """The call every rank runs for ``name``, or None where it does not run: this rank's request failed
        meanwhile, ranks have joined and it is not an allreduce, or the ranks disagree (``mine`` then fails
        with the reason)."""
        if by_rank is None:
            return None if mine is None else mine.call
        ranks = sorted(by_rank)
        base = by_rank[ranks[0]]
        error: Exception | None = None
        if joined and base.kind != CollectiveKind.ALLREDUCE:
            error = InvalidArgumentError(joined_refusal(CollectiveKind(base.kind), name, joined))
        else:
            calls = [by_rank[r] for r in ranks]
            if any(c != base for c in calls):
                try:
                    check_agreement(calls, ranks, number, mine.call if mine else base)
                except MismatchError as e:
                    error = e
        if error is None:
            return base
        if mine is not None:
            mine.finish(error=error)
        return None

    def _fusible(self, call: Call) -> bool:
        if call.kind != CollectiveKind.ALLREDUCE:
            return False
        nbytes = call.count() * ITEMSIZE[call.dtype]
        return 0 < nbytes <= min(self._fusion_bytes, _LARGEST_FUSED_BYTES)

    def _fits(self, fused: list[tuple[_Request | None, Call]], call: Call) -> bool:
        first = fused[0][1]
        same = (first.dtype, first.op, first.prescale, first.postscale) == (
            call.dtype, call.op, call.prescale, call.postscale)
        itemsize = ITEMSIZE[call.dtype]
        return same and (sum(c.count() for _, c in fused) + call.count()) * itemsize <= self._fusion_bytes

    def _run_fused(self, fused: list[tuple[_Request | None, Call]]) -> None:
        if not fused:
            return
        if len(fused) == 1:
            mine, call = fused[0]
            self._run_one(mine, call, {})
            return
        timeline = self._timeline if self._timeline.on else None
        copy_in = now_ns() if timeline is not None else 0
        storage = STORAGE[fused[0][1].dtype]
        parts = [mine.data if mine is not None else np.zeros(call.count(), storage) for mine, call in fused]
        buffer = np.concatenate(parts)
        first = fused[0][1]
        start = now_ns() if timeline is not None else 0
        transfers.allreduce(self._comm, buffer, first._replace(name="fused", shape=(buffer.size,)))
        end = now_ns() if timeline is not None else 0
        offset = 0
        for (mine, call), part in zip(fused, parts):
            if mine is not None:
                copy_out = now_ns() if timeline is not None else 0
                mine.data[...] = buffer[offset:offset + part.size]
                if timeline is not None:
                    self._trace_fused(timeline, mine.call.name, copy_in, start, end, copy_out,
                                      f"{len(fused)} tensors, {buffer.nbytes} bytes")
                mine.finish()
            offset += part.size

    def _trace_fused(self, timeline: EngineTimeline, name: str, copy_in: int, start: int, end: int, copy_out: int,
                     detail: str) -> None:
        """A fused allreduce's phases, as the native engine records them (one copy into the buffer for all)."""
        timeline.phase(name, QUEUE, self._negotiated_ns or copy_in, copy_in)
        timeline.phase(name, MEMCPY_IN, copy_in, start)
        timeline.phase(name, phase_of(CollectiveKind.ALLREDUCE), start, end, detail)
        timeline.phase(name, MEMCPY_OUT, copy_out, now_ns())

    def _run_one(self, mine: _Request | None, base: Call, by_rank: dict[int, Call] | None) -> None:
        """One collective. ``mine`` is None only on a rank that has joined, and then only for an allreduce
        (nothing else runs while ranks have joined), to which it contributes zeros."""
        start = now_ns() if self._timeline.on else 0
        storage = STORAGE[base.dtype] if base.dtype >= 0 else np.uint8
        data = mine.data if mine is not None else None
        kind = base.kind
        if kind == CollectiveKind.ALLREDUCE:
            transfers.allreduce(self._comm, data if data is not None else np.zeros(base.count(), storage), base)
            result: Any = None
        elif kind == CollectiveKind.BROADCAST:
            transfers.broadcast(self._comm, data, base.root)
            result = None
        elif kind == CollectiveKind.REDUCESCATTER:
            result = tuple(transfers.reducescatter(self._comm, data, base))
        elif kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL):
            calls = [base] * self._size if by_rank is None else [by_rank[r] for r in range(self._size)]
            if kind == CollectiveKind.ALLGATHER:
                result = transfers.allgather(self._comm, data, calls)
            else:
                result = transfers.alltoall(self._comm, data, calls, self._rank)
        elif kind == CollectiveKind.BARRIER:
            self._comm.Barrier()
            result = None
        else:
            raise CollectiveError(f"unknown collective kind {kind}")
        if mine is not None:
            if start and self._timeline.on:
                self._timeline.phase(base.name, QUEUE, self._negotiated_ns or start, start)
                self._timeline.phase(base.name, phase_of(kind), start, now_ns())
            mine.finish(result)

    def _finish_join(self) -> None:
        last = self._table.take_join()
        if last is None:
            return
        with self._cond:
            joins, self._joins = self._joins, []
        for request in joins:
            request.finish(last)

    def _warn_stalls(self) -> None:
        if not self._stall_check_s:
            return
        now = time.monotonic()
        for name, pending in list(self._table.pending.items()):
            if name not in self._warned and now - pending.first_seen > self._stall_check_s:
                self._warned.add(name)
                # The native stall inspector's words, so logs read alike on both backends.
                logger.warning("stall: %s '%s' was submitted by rank(s) %s but not by rank(s) %s for %d s",
                               _kind_of(pending), name, _rank_list(pending.calls),
                               _rank_list(self._table.missing(name)), int(now - pending.first_seen))

    def _fail_stalled(self, last_round: int) -> None:
        """The stall shutdown: once any rank has waited ``stall_shutdown_s`` for requests some ranks never
        submitted, every rank drops the requests first announced by the round it names (the same ones on
        every rank) and fails its own among them, naming the missing ranks as the native engine does."""
        for name, pending, absent in self._table.take_stalled(last_round):
            self._warned.discard(name)
            with self._lock:
                mine = self._in_flight.pop(name, None)
            if mine is not None:
                mine.finish(error=CollectiveTimeoutError(
                    f"{_kind_of(pending)} '{name}' stalled: rank(s) {_rank_list(pending.calls)} submitted it but "
                    f"rank(s) {_rank_list(absent)} did not within {int(self._stall_shutdown_s)} s"))

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            waiting = [r for r in self._handles.values() if not r.done]
            self._in_flight.clear()
            self._joins.clear()
        for request in waiting:
            request.finish(error=error)


def _kind_of(pending: Any) -> str:
    return next(iter(pending.calls.values())).kind_name


def _rank_list(ranks: Any) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def _auto_name(kind: int, number: int) -> str:
    return auto_name(kind_name(kind), number)
